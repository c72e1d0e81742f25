"""``lastgood mcp``: driven by the official SDK's own client (``ClientSession`` over ``stdio_client``).

One server per module, started as a user's assistant starts it (``lastgood mcp sample_data/agents
sample_data/langgraph.sqlite``, a temporary LASTGOOD_HOME); every tool is called on the sample
stores, answers are compared with the CLI's ``--format json`` output (the CLI runs between calls on
the same index: the server holds it only during a call), bad arguments are tool errors that leave
the server serving, no answer carries a secret of the sample stores, ``apply_*`` exists only with
``--allow-write``, a full verify reports progress, and the HTTP transport answers on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from anyio.from_thread import BlockingPortal, start_blocking_portal  # noqa: E402
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.types import Implementation  # noqa: E402

from tests.fixtures_browser import free_port  # noqa: E402
from tests.helpers import lastgood_cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENTS, LANGGRAPH = "sample_data/agents", "sample_data/langgraph.sqlite"
LASTGOOD = str(Path(sys.executable).with_name("lastgood"))
SECRET_MARK = "sk-lastgood"  # both sample stores hold an API key that starts so
CLIENT_NAME = "lastgood-tests"
READ_TOOLS = {"list_stores", "runs", "list_checkpoints", "show", "diff", "steps", "track", "diverge", "bisect",
              "verify", "findings", "journal", "sql", "plan_restore", "plan_rollback", "plan_quarantine",
              "plan_undo"}
APPLY_TOOLS = {"apply_restore", "apply_rollback", "apply_quarantine", "apply_undo"}
ANSWERS: list[str] = []  # every text any server sent in this module (the secret test reads them all)


@dataclass
class Reply:
    error: bool
    texts: list[str]

    @property
    def value(self) -> Any:
        assert not self.error, self.texts
        return json.loads(self.texts[0])

    @property
    def page(self) -> dict[str, Any]:
        return json.loads(self.texts[1])["page"]


class Client:
    """The SDK's async client, driven from synchronous tests through an anyio blocking portal."""

    def __init__(self, portal: BlockingPortal, session: ClientSession) -> None:
        self.portal, self.session = portal, session

    def call(self, tool: str, progress: list | None = None, **arguments: Any) -> Reply:
        async def record(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        result = self.portal.call(lambda: self.session.call_tool(
            tool, arguments, progress_callback=record if progress is not None else None))
        texts = [block.text for block in result.content]
        ANSWERS.extend(texts)
        return Reply(bool(result.is_error), texts)

    def tools(self) -> set[str]:
        return {t.name for t in self.portal.call(self.session.list_tools).tools}


@contextlib.contextmanager
def connected(transport: Any) -> Iterator[Client]:
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(transport) as (read, write):
            session = ClientSession(read, write, client_info=Implementation(name=CLIENT_NAME, version="1"))
            with portal.wrap_async_context_manager(session) as opened:
                portal.call(opened.initialize)
                yield Client(portal, opened)


def stdio(home: Path, *args: str) -> Any:
    env = dict(os.environ, LASTGOOD_HOME=str(home))
    return stdio_client(StdioServerParameters(command=LASTGOOD, args=["mcp", *args], env=env, cwd=str(ROOT)),
                        errlog=sys.stderr)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-home")


@pytest.fixture(scope="module")
def mcp(home: Path) -> Iterator[Client]:
    with connected(stdio(home, AGENTS, LANGGRAPH)) as client:
        yield client


def cli_json(home: Path, *args: str) -> Any:
    args = tuple(str(ROOT / a) if a in (AGENTS, LANGGRAPH) else a for a in args)  # from any directory
    done = lastgood_cli(*args, "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def ids(mcp: Client) -> dict[str, Any]:
    """Checkpoints and runs of the sample stores to call the tools with."""
    native = mcp.call("list_checkpoints", store=AGENTS, run="research-001", limit=100).value
    graph = mcp.call("list_checkpoints", store=LANGGRAPH, run="trading-001", limit=100).value
    graph = [r for r in graph if r["namespace"] == ""]
    return {"native": [r["checkpoint_id"] for r in native if r["status"] == "ok"],
            "graph": [r["checkpoint_id"] for r in graph if r["status"] == "ok"]}


# ---- the tools --------------------------------------------------------------------------------------------------


def test_the_read_tools_and_plans_are_served_and_apply_is_not(mcp: Client) -> None:
    assert mcp.tools() == READ_TOOLS
    refused = mcp.call("apply_restore", store=LANGGRAPH, checkpoint="x", reason="test")
    assert refused.error and "apply_restore" in refused.texts[0]


def test_list_stores_names_each_store_and_its_handle(mcp: Client) -> None:
    stores = mcp.call("list_stores").value
    assert [Path(s["store"]).name for s in stores] == ["agents", "langgraph.sqlite"]
    assert all(s["handle"].startswith("store:") for s in stores)
    by_handle = mcp.call("runs", store=stores[0]["handle"]).value
    assert by_handle == mcp.call("runs", store=AGENTS).value


def test_every_read_tool_answers_on_both_sample_stores(mcp: Client, ids: dict[str, Any]) -> None:
    native, graph = ids["native"], ids["graph"]
    calls = [
        ("runs", {"store": AGENTS}), ("runs", {"store": LANGGRAPH}),
        ("list_checkpoints", {"store": LANGGRAPH, "status": "ok", "limit": 5}),
        ("show", {"store": AGENTS, "checkpoint": native[3]}), ("show", {"store": LANGGRAPH, "checkpoint": graph[3]}),
        ("diff", {"store": LANGGRAPH, "a": graph[1], "b": graph[4]}),
        ("diff", {"store": AGENTS, "a": native[0], "b": graph[2], "store_b": LANGGRAPH}),
        ("steps", {"store": AGENTS, "run": "research-001"}), ("steps", {"store": LANGGRAPH, "run": "trading-001"}),
        ("track", {"store": AGENTS, "run": "research-001", "path": "/llm/messages"}),
        ("track", {"store": LANGGRAPH, "run": "trading-001", "path": "/messages"}),
        ("diverge", {"store": AGENTS, "run_a": "trading-003", "run_b": "trading-004"}),
        ("diverge", {"store": LANGGRAPH, "run_a": "trading-001", "run_b": "trading-002"}),
        ("bisect", {"store": AGENTS, "run": "research-001", "where": "len(/llm/messages) >= 10"}),
        ("bisect", {"store": LANGGRAPH, "run": "trading-001", "where": "len(/messages) >= 3"}),
        ("verify", {"store": AGENTS}), ("verify", {"store": LANGGRAPH}),
        ("findings", {"store": AGENTS, "severity": "error"}), ("findings", {"store": LANGGRAPH}),
        ("journal", {"store": AGENTS}), ("journal", {"store": LANGGRAPH}),
        ("plan_restore", {"store": LANGGRAPH, "checkpoint": graph[2]}),
        ("plan_restore", {"store": AGENTS, "last_good": "research-001"}),
        ("plan_rollback", {"store": LANGGRAPH, "run": "trading-001", "to": graph[2]}),
        ("plan_quarantine", {"store": AGENTS, "checkpoint": native[5]}),
    ]
    for tool, arguments in calls:
        reply = mcp.call(tool, **arguments)
        assert not reply.error, (tool, arguments, reply.texts)
        assert reply.value is not None, tool
    assert mcp.call("bisect", store=AGENTS, run="research-001", where="len(/llm/messages) >= 10").value["found"]
    errors = mcp.call("findings", store=AGENTS, severity="error").value
    assert {f["check"] for f in errors} >= {"sha256-mismatch", "blob-missing"}


def test_answers_are_the_cli_json(mcp: Client, home: Path, ids: dict[str, Any]) -> None:
    graph = ids["graph"]
    assert mcp.call("runs", store=LANGGRAPH).value == cli_json(home, "runs", LANGGRAPH)
    rows = mcp.call("list_checkpoints", store=AGENTS, limit=10_000)
    assert rows.value == cli_json(home, "ls", AGENTS)
    assert rows.page == {"offset": 0, "limit": 10_000, "returned": 2386, "total": 2386, "next_offset": None}
    assert (mcp.call("show", store=LANGGRAPH, checkpoint=graph[5]).value
            == cli_json(home, "show", LANGGRAPH, graph[5]))
    assert (mcp.call("diff", store=LANGGRAPH, a=graph[0], b=graph[6]).value
            == cli_json(home, "diff", LANGGRAPH, graph[0], graph[6]))
    assert mcp.call("steps", store=AGENTS, run="support-002").value == cli_json(home, "steps", AGENTS, "support-002")


def test_a_dry_run_plan_equals_the_cli_dry_run(mcp: Client, home: Path, ids: dict[str, Any]) -> None:
    target = ids["graph"][2]
    plan = mcp.call("plan_restore", store=LANGGRAPH, checkpoint=target).value
    assert plan["dry_run"] is True and plan["action_id"] is None and plan["plan_digest"]
    assert plan == cli_json(home, "restore", LANGGRAPH, target, "--dry-run")
    native = ids["native"][4]
    assert (mcp.call("plan_quarantine", store=AGENTS, checkpoint=native).value
            == cli_json(home, "quarantine", AGENTS, native, "--dry-run"))


def test_listings_and_changes_come_a_page_at_a_time(mcp: Client, ids: dict[str, Any]) -> None:
    whole = mcp.call("list_checkpoints", store=LANGGRAPH, limit=10_000).value
    rows, offset = [], 0
    while offset is not None:
        reply = mcp.call("list_checkpoints", store=LANGGRAPH, offset=offset, limit=150)
        rows += reply.value
        offset = reply.page["next_offset"]
    assert rows == whole and reply.page["total"] == len(whole)
    graph = ids["graph"]
    full = mcp.call("diff", store=LANGGRAPH, a=graph[0], b=graph[-1], limit=10_000).value
    first = mcp.call("diff", store=LANGGRAPH, a=graph[0], b=graph[-1], limit=2)
    assert first.value["changes"] == full["changes"][:2] and first.value["summary"] == full["summary"]
    assert first.page["total"] == len(full["changes"])


def test_a_long_state_comes_as_pages_of_its_json_text(mcp: Client, ids: dict[str, Any]) -> None:
    ref = ids["native"][-1]
    whole = mcp.call("show", store=AGENTS, checkpoint=ref).value
    text, offset = "", 0
    while offset is not None:
        shown = mcp.call("show", store=AGENTS, checkpoint=ref, state_offset=offset, state_limit=700).value
        assert shown["state"] is None
        text += shown["state_page"]["text"]
        offset = shown["state_page"]["next_offset"]
    assert json.loads(text) == whole["state"]
    one = mcp.call("show", store=AGENTS, checkpoint=ref, state_path="/llm/messages/0").value
    assert one["state"] == whole["state"]["llm"]["messages"][0] and one["state_path"] == "/llm/messages/0"


def test_bad_arguments_are_one_line_tool_errors_and_the_server_keeps_serving(mcp: Client) -> None:
    bad = [
        ("no_such_tool", {}),
        ("show", {"store": AGENTS}),  # a required argument missing
        ("list_checkpoints", {"store": AGENTS, "limit": "many"}),
        ("list_checkpoints", {"store": AGENTS, "limit": 0}),
        ("list_checkpoints", {"store": AGENTS, "limit": 10_001}),
        ("list_checkpoints", {"store": AGENTS, "offset": -1}),
        ("list_checkpoints", {"store": AGENTS, "status": "broken"}),
        ("list_checkpoints", {"store": AGENTS, "limt": 5}),
        ("list_checkpoints", {"store": AGENTS, "run": "no-such-run"}),
        ("runs", {"store": "/etc"}),  # not served
        ("runs", {"store": "store:999"}),
        ("runs", {"store": ""}),
        ("show", {"store": AGENTS, "checkpoint": "ffffffff"}),
        ("show", {"store": AGENTS, "checkpoint": "01a19715-ae98", "state_path": "/no/such/key"}),
        ("diff", {"store": AGENTS, "a": "01a1", "b": "01a1"}),  # ambiguous
        ("bisect", {"store": AGENTS, "run": "research-001", "where": "__import__('os')"}),
        ("bisect", {"store": AGENTS, "run": "research-001", "where": "sql: 1; DROP TABLE x"}),
        ("track", {"store": AGENTS, "run": "research-001", "path": "no-slash"}),
        ("verify", {"store": AGENTS, "subset": "7/3"}),
        ("journal", {"store": AGENTS, "action": "explode"}),
        ("plan_restore", {"store": AGENTS}),  # neither a checkpoint nor last_good
        ("plan_undo", {"store": LANGGRAPH, "action": "act-nope"}),
    ]
    for tool, arguments in bad:
        reply = mcp.call(tool, **arguments)
        assert reply.error, (tool, arguments, reply.texts)
        message = reply.texts[0]
        assert "\n" not in message and "Traceback" not in message and message.strip(), (tool, message)
    assert "did you mean 'limit'" in mcp.call("list_checkpoints", store=AGENTS, limt=5).texts[0]
    assert "not served" in mcp.call("runs", store="/etc").texts[0]
    assert mcp.call("list_stores").value  # still serving


def test_a_full_verify_reports_progress(mcp: Client) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    report = mcp.call("verify", progress=progress, store=AGENTS, read_data=True).value
    assert report["depth"] == "data" and report["checked"] == 2386
    verifying = [p for p in progress if p[2] == "verifying"]
    assert verifying and verifying[-1][0] == verifying[-1][1] == 2386
    assert any(f["check"] == "undecodable" for f in report["findings"])


def test_sql_answers_read_only_queries_as_the_cli_does(mcp: Client, home: Path) -> None:
    query = "SELECT run_id, count(*) AS n FROM checkpoints GROUP BY run_id ORDER BY run_id"
    answer = mcp.call("sql", store=AGENTS, sql=query, limit=10_000).value
    cli = cli_json(home, "sql", AGENTS, query)
    assert {k: v for k, v in answer.items() if k != "seconds"} == {k: v for k, v in cli.items() if k != "seconds"}
    assert sum(row["n"] for row in answer["rows"]) == 2386
    first = mcp.call("sql", store=AGENTS, sql=query, limit=2).value
    assert len(first["rows"]) == 2 and first["truncated"] and first["total_rows"] == len(answer["rows"])
    assert {v["name"] for v in mcp.call("sql", store=AGENTS).value["views"]} >= {"checkpoints", "runs"}
    for refused in ("DROP TABLE checkpoints", "COPY checkpoints TO '/tmp/x.csv'", "SELECT * FROM read_csv('/etc/passwd')"):
        reply = mcp.call("sql", store=AGENTS, sql=refused)
        assert reply.error and "\n" not in reply.texts[0], refused


def test_without_a_usable_sql_core_the_sql_tool_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.errors import UsageError
    from lastgood.mcp import calls

    monkeypatch.setitem(sys.modules, "lastgood.index.sql", None)  # an import of it now fails
    with pytest.raises(UsageError, match="sql tool is not available in this build") as raised:
        calls.sql(None, store=AGENTS, sql="SELECT 1")  # type: ignore[arg-type]  # refused before the call is used
    assert "\n" not in str(raised.value) and "other tools work" in str(raised.value)


# ---- transports and writes --------------------------------------------------------------------------------------


def test_the_http_transport_answers_on_loopback_only(home: Path) -> None:
    port = free_port()
    server = subprocess.Popen([LASTGOOD, "mcp", LANGGRAPH, "--http", "--port", str(port)], cwd=ROOT,
                              env=dict(os.environ, LASTGOOD_HOME=str(home)), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        _wait_listening(port, server)
        assert _listening_addresses(port) == {"127.0.0.1"}
        with connected(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as client:
            stores = client.call("list_stores").value
            assert [Path(s["store"]).name for s in stores] == ["langgraph.sqlite"]
            assert client.call("runs", store=LANGGRAPH).value
            assert "apply_restore" not in client.tools()
    finally:
        server.terminate()
        server.wait(timeout=20)


def _wait_listening(port: int, server: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not _listening_addresses(port):
        assert server.poll() is None, server.stderr.read() if server.stderr else ""
        assert time.monotonic() < deadline, "the HTTP server did not listen"
        time.sleep(0.1)


def _listening_addresses(port: int) -> set[str]:
    """The local addresses listening on ``port`` (/proc/net/tcp and tcp6: state 0A is LISTEN)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hexport = local.rsplit(":", 1)
                if state == "0A" and int(hexport, 16) == port:
                    found.add("127.0.0.1" if address == "0100007F" else address)
    return found


def test_writes_over_http_are_refused(home: Path) -> None:
    done = lastgood_cli("mcp", str(ROOT / LANGGRAPH), "--http", "--allow-write", home=home)
    assert done.returncode == 2 and "stdio only" in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_store_that_cannot_be_opened_or_no_sdk_is_one_line_before_serving(home: Path, tmp_path: Path) -> None:
    done = lastgood_cli("mcp", str(tmp_path / "nothing-here"), home=home)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and done.stderr.startswith("lastgood: error:")
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mcp'\", name='mcp')\n")
    done = lastgood_cli("mcp", str(ROOT / LANGGRAPH), home=home, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 2 and "pip install 'lastgood[mcp]'" in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1


def test_with_allow_write_apply_needs_a_reason_and_records_the_client(tmp_path: Path) -> None:
    db = tmp_path / "graph.sqlite"
    shutil.copy(ROOT / LANGGRAPH, db)
    with connected(stdio(tmp_path / "home", str(db), "--allow-write")) as client:
        assert client.tools() == READ_TOOLS | APPLY_TOOLS
        rows = client.call("list_checkpoints", store=str(db), run="trading-001", limit=100).value
        target = [r for r in rows if r["namespace"] == "" and r["status"] == "ok"][2]["checkpoint_id"]
        missing = client.call("apply_restore", store=str(db), checkpoint=target)
        assert missing.error and "reason" in missing.texts[0]
        blank = client.call("apply_restore", store=str(db), checkpoint=target, reason="   ")
        assert blank.error and "reason" in blank.texts[0]
        stale = client.call("apply_restore", store=str(db), checkpoint=target, reason="test", plan_digest="0" * 16)
        assert stale.error and "plan changed" in stale.texts[0]
        assert client.call("journal", store=str(db)).value["actions"] == []  # nothing was written
        plan = client.call("plan_restore", store=str(db), checkpoint=target).value
        done = client.call("apply_restore", store=str(db), checkpoint=target, reason="bad tool output",
                           plan_digest=plan["plan_digest"]).value
        assert done["action_id"] and done["new_head"] != plan["previous_head"]
        entry = client.call("journal", store=str(db)).value["actions"][-1]
        assert entry["operator"] == f"mcp:{CLIENT_NAME}" and entry["reason"] == "bad tool output"
        undone = client.call("apply_undo", store=str(db), action=done["action_id"], reason="put it back").value
        assert undone["undo_of"] == done["action_id"]


# ---- secrets ----------------------------------------------------------------------------------------------------


def test_no_answer_carries_a_secret_of_the_sample_stores(mcp: Client) -> None:
    holders = [(AGENTS, "research-001/01a19785-c5e8"), (LANGGRAPH, "1f1d76c7-d127-6f00-8001-c412b86ed2fc")]
    for store, ref in holders:
        shown = mcp.call("show", store=store, checkpoint=ref)
        assert "[redacted]" in shown.texts[0]
        mcp.call("show", store=store, checkpoint=ref, state_limit=50)
        mcp.call("diff", store=store, a=ref, b=ref)
    mcp.call("diff", store=AGENTS, a="01a19715-ae98", b="research-001/01a19785-c5e8")
    mcp.call("bisect", store=AGENTS, run="research-001", where=f'/api_key == "{SECRET_MARK}-sample-9f8e7d6c5b4a39281706"')
    mcp.call("runs", store=AGENTS, run=f"{SECRET_MARK}-sample-9f8e7d6c5b4a39281706")  # an error that names it
    assert len(ANSWERS) > 100
    leaked = [text[:200] for text in ANSWERS if SECRET_MARK in text]
    assert leaked == []
