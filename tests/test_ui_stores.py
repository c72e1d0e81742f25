"""`lastgood ui` opens every kind of store the CLI opens (issue: URLs with a scheme were cut at ':').

Each case starts the real `lastgood ui` with one kind of store — a native folder, a LangGraph
`.sqlite` file, `sqlite:///…`, `file://…`, `s3://…` on the moto server, `postgresql://` with a
password on the PostgreSQL server — and one run opens all of them at once. Chromium loads the
Overview and sees each store's checkpoint count (the count `lastgood ls` reports); the same stores
open through the sidebar's "Open a store"; the password appears in no `ps` output, in neither
process's environment or command line, in no index file, and not on the page.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures_browser import free_port, group_pids, stop_group, wait_for_health
from tests.helpers import ROOT, lastgood_cli, write_store

pytestmark = pytest.mark.browser
PASSWORD = "Pw-ui-store-7Hq2xZ9"
SAMPLE_SQLITE = ROOT / "sample_data" / "langgraph.sqlite"


@dataclass(frozen=True)
class Stores:
    urls: dict[str, str]       # kind -> URL as a user types it
    counts: dict[str, int]     # kind -> checkpoints `lastgood ls` lists
    env: dict[str, str]        # S3 endpoint settings a user would have


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str, pg_create_database) -> Stores:
    base = tmp_path_factory.mktemp("ui-stores")
    env = {"FSSPEC_S3_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    urls = {"native": str(base / "native"), "sqlite-file": str(base / "a.sqlite"),
            "sqlite-url": f"sqlite:///{base / 'b.sqlite'}", "file-url": f"file://{base / 'native-2'}",
            "s3": "s3://ui-stores/agents", "postgres": _postgres_store(pg_create_database)}
    write_store(urls["native"], runs=2, steps=5)
    write_store(str(base / "native-2"), runs=3, steps=3)
    shutil.copy(SAMPLE_SQLITE, base / "a.sqlite")
    _sqlite_with_one_thread(base / "b.sqlite")
    _s3_store(s3_endpoint, env)
    counts = {kind: _count(url, base / "count-home", env) for kind, url in urls.items()}
    assert len(set(counts.values())) == len(counts), counts  # every store tells itself apart
    return Stores(urls, counts, env)


def _postgres_store(pg_create_database) -> str:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    from tests.langgraph_graphs import build_tools

    dsn = pg_create_database("ui_stores")
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
        for n in range(3):
            build_tools(saver, f"pg-thread-{n}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DO $$ BEGIN CREATE ROLE ui_user LOGIN SUPERUSER PASSWORD '{PASSWORD}'; "
                     "EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    head, _, rest = dsn.partition("://")
    return f"{head}://ui_user:{PASSWORD}@{rest.split('@', 1)[1]}"


def _sqlite_with_one_thread(path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.langgraph_graphs import build_tools

    with SqliteSaver.from_conn_string(str(path)) as saver:
        build_tools(saver, "only-thread")


def _s3_store(endpoint: str, env: dict[str, str]) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    if not fs.exists("ui-stores"):
        fs.mkdir("ui-stores")
    write_store("s3://ui-stores/agents", runs=1, steps=7,
                storage_options={"endpoint_url": endpoint, "key": "testing", "secret": "testing"})


def _count(url: str, home: Path, env: dict[str, str]) -> int:
    done = lastgood_cli("ls", url, "--format", "json", home=home, env=env)
    assert done.returncode in (0, 1), done.stderr
    return len(json.loads(done.stdout))


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    home: Path


@pytest.fixture()
def serve(tmp_path: Path, stores: Stores) -> Iterator:
    started: list[Server] = []

    def start(*urls: str) -> Server:
        port = free_port()
        home = tmp_path / f"home-{len(started)}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LASTGOOD_")}
        env.update(stores.env, LASTGOOD_HOME=str(home))
        command = [str(Path(sys.executable).with_name("lastgood")), "ui", *urls, "--port", str(port)]
        log = (tmp_path / f"ui-{len(started)}.log").open("wb")
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        server = Server(proc, f"http://127.0.0.1:{port}", home)
        started.append(server)
        wait_for_health(server.url, proc, 120)
        return server

    yield start
    for server in started:
        stop_group(server.proc)


@pytest.fixture()
def page(chromium_browser):
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def _checkpoints_shown(page, wait_ms: int = 90_000) -> str:
    """The Overview's "Checkpoints" value, once its label and every value beside it are drawn
    (Streamlit draws the metrics one by one: a label and value read half-way do not pair)."""
    labels: list[str] = []
    for _ in range(wait_ms // 250):
        labels = [x.strip() for x in page.get_by_test_id("stMetricLabel").all_inner_texts()]
        values = [v.strip() for v in page.get_by_test_id("stMetricValue").all_inner_texts()]
        if "Checkpoints" in labels and len(labels) == len(values):
            return values[labels.index("Checkpoints")]
        page.wait_for_timeout(250)
    raise AssertionError(f"the Overview showed no Checkpoints metric (labels: {labels}); "
                         f"the page: {page.inner_text('body')[:2000]}")


def _count_becomes(page, expected: str, wait_ms: int = 60_000) -> str:
    """The Overview's "Checkpoints" value once it is ``expected`` (or the last one seen after
    ``wait_ms``): while a newly opened store is indexed the previous store's figures stay on screen,
    and a short count such as "5" can be found elsewhere on the page before the Overview is redrawn."""
    shown = ""
    for _ in range(wait_ms // 250):
        shown = _checkpoints_shown(page)
        if shown == expected:
            break
        page.wait_for_timeout(250)
    return shown


def _choose_store(page, label_part: str) -> None:
    page.get_by_test_id("stSelectbox").filter(has_text="Store").click()
    page.get_by_role("option").filter(has_text=label_part).first.click()


def _assert_no_password_anywhere(server: Server, page) -> None:
    ps = subprocess.run(["ps", "axeww", "-o", "pid,args"], capture_output=True, text=True).stdout
    assert PASSWORD not in ps
    for pid in group_pids(server.proc.pid):
        for name in ("environ", "cmdline"):
            try:
                assert PASSWORD.encode() not in (Path("/proc") / str(pid) / name).read_bytes()
            except (FileNotFoundError, ProcessLookupError):  # the process ended meanwhile
                continue
    for path in server.home.rglob("*"):
        if path.is_file() and path.name != "credentials.json":
            assert PASSWORD.encode() not in path.read_bytes(), path
    vault = server.home / "credentials.json"
    if vault.exists():
        assert vault.stat().st_mode & 0o077 == 0
    _assert_page_without_password(page)


def _assert_page_without_password(page) -> None:
    """Not on the page once the run is over: a DSN typed into "Open a store" is on screen while it
    is typed and until the run that reads it redraws the box (the picker is drawn after the page's
    content, so the count can show first): the box must then be empty."""
    from playwright.sync_api import expect

    box = page.get_by_role("textbox", name="Open a store")
    if box.count():
        expect(box).to_have_value("", timeout=30_000)
    html = page.content()
    at = html.find(PASSWORD)
    assert at < 0, html[max(0, at - 400):at + 100].replace(PASSWORD, "<the password>")



KINDS = ["native", "sqlite-file", "sqlite-url", "file-url", "s3", "postgres"]


@pytest.mark.parametrize("kind", KINDS)
def test_ui_argument_opens_each_kind_of_store(kind: str, stores: Stores, serve, page) -> None:
    server = serve(stores.urls[kind])
    page.goto(server.url)
    assert _checkpoints_shown(page) == f"{stores.counts[kind]:,}"
    body = page.inner_text("body")
    assert "store not found" not in body and "No store selected" not in body
    _assert_no_password_anywhere(server, page)


def test_ui_opens_all_kinds_at_once(stores: Stores, serve, page) -> None:
    server = serve(*(stores.urls[k] for k in KINDS))
    page.goto(server.url)
    _checkpoints_shown(page)
    for kind in KINDS:
        _choose_store(page, _label(stores.urls[kind]))
        shown = _count_becomes(page, f"{stores.counts[kind]:,}")
        assert shown == f"{stores.counts[kind]:,}", (kind, shown, page.inner_text("body")[:2000])
    _assert_no_password_anywhere(server, page)


def test_sidebar_store_picker_opens_each_kind(stores: Stores, serve, page) -> None:
    server = serve()
    page.goto(server.url)
    page.get_by_text("No store selected").wait_for()
    for kind in KINDS:
        box = page.get_by_role("textbox", name="Open a store")
        box.fill(stores.urls[kind])
        box.press("Enter")
        assert _count_becomes(page, f"{stores.counts[kind]:,}") == f"{stores.counts[kind]:,}", kind
    _assert_no_password_anywhere(server, page)


def _label(url: str) -> str:
    """A part of the store's label in the picker (display_url: no credentials)."""
    from lastgood.readers.registry import display_url
    from lastgood.stores import normalize_url

    shown = display_url(normalize_url(url))
    return shown[-24:]


def test_sigint_stops_the_dashboard_too(stores: Stores, serve) -> None:
    server = serve(stores.urls["native"])
    server.proc.send_signal(signal.SIGINT)
    server.proc.wait(timeout=30)
    assert group_pids(server.proc.pid) == []
