"""What makes ``lastgood ui`` open fast (issue #8), as behaviour rather than wall-clock thresholds.

- the command serves from its own process (no second interpreter running ``streamlit run``);
- the stores are refreshed by a start-up thread and the first page uses that refresh instead of
  indexing the store again (later sessions refresh it themselves);
- a store that cannot be opened, or a URL with a secret, still gives one line and exit 2;
- Streamlit's component-manifest scan is skipped, background checks are cancelled at shutdown.

Real native stores (tests/helpers.write_store), real AppTest runs and the real console script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.integrity import background
from lastgood.index import queries
from lastgood.serve import process as serve
from lastgood.serve import startup
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store, normalize_url
from lastgood.ui import stores as ui_stores
from tests.fixtures_browser import free_port, group_pids, stop_group, wait_for_health
from tests.helpers import lastgood_cli, write_store

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
RUNS, STEPS = 2, 6


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A never-seen native store and an empty home, as the dashboard's environment names them."""
    url = normalize_url(str(tmp_path / "store"))
    write_store(url, runs=RUNS, steps=STEPS)
    home = tmp_path / "home"
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", url)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    monkeypatch.delenv("LASTGOOD_BACKGROUND_CHECK", raising=False)
    return url, home


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_first_page_uses_the_startup_refresh_instead_of_indexing_again(store, monkeypatch) -> None:
    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    thread = serve.refresh_in_background(index_path, [url])
    assert thread.daemon and thread.name == "lastgood-startup-index"
    calls: list[str] = []
    real_index_store = ui_stores.index_store
    monkeypatch.setattr(ui_stores, "index_store", lambda c, u, **k: calls.append(u) or real_index_store(c, u, **k))

    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metrics(at)["Checkpoints"] == f"{RUNS * STEPS}"
    assert calls == []  # the start-up thread's refresh was used, not a second one
    assert serve.take_startup_refresh(index_path, url) is None  # taken by that first session

    again = AppTest.from_file(ENTRY, default_timeout=60).run()  # a later session refreshes itself
    assert _metrics(again)["Checkpoints"] == f"{RUNS * STEPS}"
    assert calls == [url]


def test_a_never_seen_store_registered_but_not_yet_listed_waits_for_the_startup_refresh(
        store, monkeypatch) -> None:
    """The start-up thread registers a never-seen store before listing it: a first page that
    arrives in between must wait for the listing, not show the empty store as a known one."""
    import threading

    from lastgood import stores

    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    registered, gate = threading.Event(), threading.Event()
    real_index_store = stores.index_store

    def registered_then_listed(catalog, u, **kwargs):
        stores.open_store(catalog, u, kwargs.get("reader_name")).reader.close()  # the row exists
        registered.set()
        gate.wait(30)
        return real_index_store(catalog, u, **kwargs)

    monkeypatch.setattr(stores, "index_store", registered_then_listed)
    serve.refresh_in_background(index_path, [url], in_child=False)  # the in-process path (fallback)
    assert registered.wait(30)
    threading.Timer(1.0, gate.set).start()  # the listing ends while the first page runs
    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metrics(at)["Checkpoints"] == f"{RUNS * STEPS}"


def test_a_failed_startup_refresh_is_shown_by_the_page(tmp_path: Path, monkeypatch) -> None:
    missing = normalize_url(str(tmp_path / "no-such-store"))
    home = tmp_path / "home"
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", missing)
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    serve.refresh_in_background(index_path, [missing]).join(30)
    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception
    assert any("no-such-store" in e.value for e in at.error), [e.value for e in at.error]


def test_startup_refresh_is_taken_once_and_reports_what_it_did(store) -> None:
    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    serve.refresh_in_background(index_path, [url]).join(60)
    refresh = serve.take_startup_refresh(index_path, url)
    assert refresh is not None and refresh.done.is_set() and refresh.error is None
    assert refresh.changed and refresh.store_id == queries.indexed_stores(Catalog(index_path))[url]
    assert serve.take_startup_refresh(index_path, url) is None


def test_a_never_seen_store_is_indexed_by_a_child_process_while_pages_wait(store) -> None:
    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    before = len(serve._children)
    thread = serve.refresh_in_background(index_path, [url])
    assert [r.url for r in serve.indexing_first(index_path)] == [url]  # pages wait for it
    thread.join(90)
    child = serve._children[before]
    assert child.pid != os.getpid() and child.returncode == 0  # another process did the work
    refresh = serve.take_startup_refresh(index_path, url)
    assert refresh is not None and refresh.error is None and refresh.changed
    assert refresh.store_id == queries.indexed_stores(Catalog(index_path))[url]
    assert serve.indexing_first(index_path) == []
    again = serve.refresh_in_background(index_path, [url])  # nothing new: done, not changed
    again.join(90)
    assert serve.take_startup_refresh(index_path, url).changed is False


def test_a_child_that_dies_marks_its_stores_failed(store, monkeypatch) -> None:
    from lastgood.serve import startup as startup_index

    url, home = store
    index_path = str(home / "index.duckdb")
    monkeypatch.setattr(startup_index, "command",
                        lambda *a: [sys.executable, "-c", "import sys; sys.exit('refresh crashed')"])
    serve.refresh_in_background(index_path, [url]).join(60)
    refresh = serve.take_startup_refresh(index_path, url)
    assert refresh is not None and refresh.done.is_set()
    assert "exit 1" in str(refresh.error) and "refresh crashed" in str(refresh.error)


def _children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_the_startup_indexing_child_ends_with_the_dashboard(store) -> None:
    """Killed however (here SIGKILL, no shutdown hook), the dashboard takes its indexing child
    with it: the child, kept waiting on the index's lock, must not live on."""
    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('locked', flush=True); time.sleep(120)", index_path],
                              stdout=subprocess.PIPE, text=True)
    dashboard = subprocess.Popen([sys.executable, "-c", "import sys, time; from lastgood.serve import process as serve; "
                                  "serve.refresh_in_background(sys.argv[1], [sys.argv[2]]); time.sleep(120)",
                                  index_path, url])
    try:
        assert holder.stdout.readline().strip() == "locked"  # the child will wait on the lock (15 s)
        deadline = time.monotonic() + 30
        while not (children := _children_of(dashboard.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "no indexing child started"
        time.sleep(1.0)  # the child is past its start
        dashboard.kill()
        dashboard.wait(10)
        deadline = time.monotonic() + 8  # well before its lock wait would end
        while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(Path(f"/proc/{pid}").exists() for pid in children)
    finally:
        for proc in (dashboard, holder):
            proc.kill()
            proc.wait(10)


def test_public_urls_keep_secrets_out_of_the_command_line(tmp_path: Path) -> None:
    urls, had_secret = serve.public_urls(["postgresql://me:Sekret-9@db.example/x", str(tmp_path)],
                                         tmp_path / "home")
    assert urls == ["postgresql://me@db.example/x", str(tmp_path)]
    assert had_secret
    assert "Sekret-9" in (tmp_path / "home" / "credentials.json").read_text()
    assert serve.public_urls([str(tmp_path)], tmp_path / "home") == ([str(tmp_path)], False)


def test_ui_serves_from_its_own_process(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=3)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LASTGOOD_")}
    env["LASTGOOD_HOME"] = str(tmp_path / "home")
    proc = subprocess.Popen([str(Path(sys.executable).with_name("lastgood")), "ui", url, "--port", str(port)],
                            env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_health(f"http://127.0.0.1:{port}", proc, 90)
        deadline = time.monotonic() + 60  # the never-seen store's indexing child ends on its own
        while group_pids(proc.pid) != [proc.pid] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_pids(proc.pid) == [proc.pid]  # one process serves: no second interpreter
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert b"ui" in argv and b"streamlit" not in b" ".join(argv)  # not exec'd into `streamlit run`
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop_group(proc)


SERVER_START_PROBE = """
import json, sys
from lastgood.cli import main as cli
from lastgood.index import page_queries
from lastgood.ui import webserver

def run(host, port, when_listening=None):  # what is done when the server would start listening
    def seen():
        return {"modules": [m in sys.modules for m in ("lastgood.ui.server", "lastgood.ui.overview")],
                "queries read ahead": len(page_queries._prepared)}
    before = seen()
    when_listening()
    print(json.dumps({"before": before, "after": seen()}))

webserver.run = run
sys.exit(cli.main(sys.argv[1:]))
"""


def test_the_first_pages_work_starts_once_the_server_listens(tmp_path: Path) -> None:
    from lastgood.index import page_queries

    url = str(tmp_path / "store")
    write_store(url, runs=1, steps=3)
    home = tmp_path / "home"
    index_store(Catalog(str(home / "index.duckdb")), normalize_url(url), check="structure")  # a reopen
    env = {k: v for k, v in os.environ.items() if not k.startswith("LASTGOOD_")}
    done = subprocess.run([sys.executable, "-c", SERVER_START_PROBE, "ui", url, "--port", str(free_port()),
                           "--home", str(home)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # nothing of the first page before the server listens; its queries and modules once it does
    assert seen == {"before": {"modules": [False, False], "queries read ahead": 0},
                    "after": {"modules": [True, True], "queries read ahead": len(page_queries.OVERVIEW)}}


def test_the_pages_code_loads_after_streamlits_own_start_hook() -> None:
    import threading
    import types

    from lastgood.ui import webserver

    calls: list[str] = []
    done = threading.Event()
    bootstrap = types.SimpleNamespace(_on_server_start=lambda server: calls.append(f"streamlit {server}"))
    webserver.call_when_listening(bootstrap, lambda: (calls.append(threading.current_thread().name), done.set()))
    assert calls == []  # nothing before the server started
    bootstrap._on_server_start("started")
    assert done.wait(10)
    assert calls == ["streamlit started", "lastgood-load-pages"]  # after Streamlit's hook, in a thread


def test_ui_on_a_store_that_cannot_be_opened_is_one_line_exit_2(tmp_path: Path) -> None:
    done = lastgood_cli("ui", str(tmp_path / "nothing-here"), "--port", str(free_port()),
                        home=tmp_path / "home")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_ui_with_a_password_in_the_url_reexecutes_without_it(tmp_path: Path) -> None:
    # nothing listens on port 1: opening the store fails after the re-exec, one line, exit 2
    done = lastgood_cli("ui", "postgresql://me:Pw-in-argv-3@127.0.0.1:1/db", "--port", str(free_port()),
                        home=tmp_path / "home")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Pw-in-argv-3" not in done.stderr + done.stdout
    assert "Pw-in-argv-3" in (tmp_path / "home" / "credentials.json").read_text()


def test_component_manifest_scan_is_skipped(monkeypatch) -> None:
    from streamlit.components.v2 import manifest_scanner

    from lastgood.ui import webserver

    monkeypatch.setattr(manifest_scanner, "scan_component_manifests", manifest_scanner.scan_component_manifests)
    assert webserver.skip_component_scan()
    assert manifest_scanner.scan_component_manifests() == []


def test_the_first_element_skips_streamlits_repl_probe(monkeypatch) -> None:
    from streamlit import delta_generator, env_util

    from lastgood.ui import webserver

    monkeypatch.setattr(delta_generator, "_use_warning_has_been_displayed", False)
    probes: list[bool] = []
    monkeypatch.setattr(env_util, "is_repl", lambda: probes.append(True) or False)
    webserver.skip_use_warning_probe()
    delta_generator._maybe_print_use_warning()
    assert probes == []  # no inspect.stack() walk before the first element


def test_page_runs_skip_streamlits_full_garbage_collection() -> None:
    from streamlit import config
    from streamlit.web import bootstrap

    from lastgood.ui import webserver

    flags = webserver.options("127.0.0.1", free_port())
    try:
        bootstrap.load_config_options(flag_options=flags)
        assert config.get_option("runner.postScriptGC") is False  # an option Streamlit still knows
    finally:
        config._config_options = None  # the next test reads the defaults again


def test_cancel_all_stops_background_checks(store) -> None:
    url, home = store
    index_path = str(home / "index.duckdb")
    Catalog(index_path).close()
    job = background.start(index_path, url, "data", delay=60)  # waiting before its work
    started = time.monotonic()
    background.cancel_all(timeout=20)
    assert time.monotonic() - started < 20
    assert job.thread is not None and not job.thread.is_alive()
    assert job.state == "cancelled"


def test_a_known_store_is_shown_at_once_and_refreshed_after_the_first_page(store, monkeypatch) -> None:
    import threading

    url, home = store
    index_path = str(home / "index.duckdb")
    index_store(Catalog(index_path), url, check="structure")  # indexed before: this is a reopen
    monkeypatch.setattr(startup, "first_page_shown", threading.Event())  # no page drawn yet
    thread = serve.refresh_in_background(index_path, [url], known=[url])
    time.sleep(0.3)
    assert thread.is_alive()  # a known store's refresh waits for the first page
    calls: list[str] = []
    monkeypatch.setattr(ui_stores, "index_store", lambda *a, **k: calls.append(a[1]))

    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metrics(at)["Checkpoints"] == f"{RUNS * STEPS}"  # the index as it is, at once
    assert any("Looking for new checkpoints" in c.value for c in at.sidebar.caption)
    assert calls == []  # not re-listed before the first page
    assert startup.first_page_shown.is_set()
    thread.join(60)
    assert not thread.is_alive()  # the refresh ran once the page was drawn


@pytest.mark.parametrize("depth", ["structure", "data"])
def test_the_sidebars_automatic_data_check_never_reads_every_runs_health(store, monkeypatch, depth: str) -> None:
    # it decides from one small count; run health takes ~0.8 s of CPU for 1,600 runs, while the
    # browser draws the first screen, on every session's first page
    from lastgood.ui import integrity as ui_integrity

    url, home = store
    index_path = str(home / "index.duckdb")
    index_store(Catalog(index_path), url, check=depth)  # blobs unread (structure), or all read (data)
    monkeypatch.setenv("LASTGOOD_BACKGROUND_CHECK", "1")

    def no_health(*args: object) -> None:
        raise AssertionError("a page's sidebar read every run's health")

    monkeypatch.setattr(ui_integrity, "integrity_data", no_health)
    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metrics(at)["Checkpoints"] == str(RUNS * STEPS)
    job = background.job(index_path, url)
    if depth == "data":
        assert job is None  # nothing left for a data check to read
        return
    assert job is not None and job.depth == "data" and job.only_unverified
    background.wait(index_path, url, timeout=120)
    assert job.state == "done"


def test_with_writes_enabled_the_first_page_waits_for_a_known_stores_refresh(store, monkeypatch) -> None:
    from lastgood.readers.native.writer import NativeWriter

    url, home = store
    index_path = str(home / "index.duckdb")
    index_store(Catalog(index_path), url, check="structure")
    NativeWriter(url, create=False).save("run-0", {"late": True})  # written after the last index
    monkeypatch.setenv("LASTGOOD_ALLOW_WRITE", "1")
    import lastgood.stores

    real_index_store = lastgood.stores.index_store

    def slow_index_store(*args, **kwargs):
        time.sleep(1.0)  # still running when the first page asks for it
        return real_index_store(*args, **kwargs)

    monkeypatch.setattr(lastgood.stores, "index_store", slow_index_store)
    serve.refresh_in_background(index_path, [url], known=())  # as `lastgood ui --allow-write` starts it
    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metrics(at)["Checkpoints"] == f"{RUNS * STEPS + 1}"  # no action starts from a stale view
    assert not any("Looking for new checkpoints" in c.value for c in at.sidebar.caption)


# ---- the Overview: figures without Plotly, data without pandas ------------------------------

NO_PANDAS_CHILD = """
import json, sys
import streamlit as st
from lastgood import ui
from lastgood.ui import overview
ref = ui.StoreRef(sys.argv[1], sys.argv[2], int(sys.argv[3]))
data = overview.overview_data(ref)
overview.render_kpis(ref, data.overview)
overview.render_actions(ref, data.actions)
from lastgood.display import svg_charts
overview.figure(svg_charts.status_bars(data.status))
overview.figure(svg_charts.growth_areas(data.growth))
ui.show_table(data.runs, ["run_id", "agent", "checkpoints", "last_at", "size_bytes"], empty="-")
print(json.dumps({"pandas": "pandas" in sys.modules, "plotly_figures": "plotly.graph_objs._figure" in sys.modules,
                  "runs": data.runs.num_rows, "status": data.status.to_pylist(),
                  "damaged": [a.run_id for a in data.actions if a.run_id],
                  "failure": " ".join(str(v) for v in data.failures.column("detail").to_pylist())}))
"""


def test_the_overview_is_drawn_without_pandas(tmp_path: Path) -> None:
    """The Overview is the first page `lastgood ui` draws: its queries, figures, tables and
    redaction need neither pandas (~0.3-0.5 s to import) nor plotly's figure classes (a fresh
    interpreter, as the dashboard's process is before its first page)."""
    from tests.fixtures_browser import SECRET, build_demo_store

    demo = build_demo_store(tmp_path / "demo", tmp_path / "home")  # one corrupt checkpoint, a secret
    index_path = str(tmp_path / "home" / "index.duckdb")
    store_id = queries.indexed_stores(Catalog(index_path, keep_open=False))[demo.url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LASTGOOD_")}
    done = subprocess.run([sys.executable, "-c", NO_PANDAS_CHILD, index_path, demo.url, str(store_id)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["pandas"] is False and report["plotly_figures"] is False
    assert report["runs"] == 3
    assert {row["status"]: row["checkpoints"] for row in report["status"]} == {"ok": 17, "corrupt": 1}
    assert report["damaged"] == ["run-gamma", "run-beta"]  # the corrupt run, the run with an error event
    assert "[redacted]" in report["failure"] and SECRET not in done.stdout


def test_overview_growth_stacks_every_agent_at_every_bucket(tmp_path: Path) -> None:
    from lastgood.index import overview

    url = normalize_url(str(tmp_path / "store"))
    write_store(url, runs=3, steps=12)  # agent-0 writes in minutes 0-11 and 20-31, agent-1 in 10-21
    catalog = Catalog(str(tmp_path / "index.duckdb"))
    store_id = index_store(catalog, url, check="structure").store.store_id
    series: dict[str, list[tuple[float, int]]] = {}
    for row in overview.growth(catalog, store_id, buckets=31).to_pylist():
        series.setdefault(row["agent"], []).append((row["at_ms"], row["total_bytes"]))
    assert set(series) == {"agent-0", "agent-1"}
    assert [t for t, _ in series["agent-0"]] == [t for t, _ in series["agent-1"]]  # the same buckets
    stored = {row["agent"]: row["size_bytes"] for row in overview.agents(catalog, store_id).to_pylist()}
    for agent, points in series.items():
        totals = [total for _, total in points]
        assert totals == sorted(totals) and totals[-1] == stored[agent]  # cumulative, ends at its size
    assert series["agent-1"][0][1] == 0  # before agent-1's first checkpoint: zero, not a gap
    assert series["agent-1"][-1][1] == series["agent-1"][-5][1]  # after its last: carried forward


THEME_CHILD = """
import json, sys
if sys.argv[1] == "deferred":
    from lastgood.display import plotly_theme as lazy_plotly_theme
    assert lazy_plotly_theme.install()
import streamlit
loaded = sorted(m for m in ("plotly", "plotly.graph_objects", "narwhals") if m in sys.modules)
import plotly.graph_objects as go
import plotly.io as pio
figure = go.Figure(go.Bar(x=["ok"], y=[1]))
print(json.dumps({"loaded_with_streamlit": loaded, "default": pio.templates.default,
                  "template": figure.layout.template.to_plotly_json()}, sort_keys=True, default=str))
"""


def test_streamlits_plotly_theme_waits_for_the_first_plotly_import() -> None:
    """Streamlit's import no longer imports Plotly (~0.25 s): its theme is registered when
    plotly.graph_objects is first imported, and a figure made then has the same template."""
    def child(mode: str) -> dict:
        done = subprocess.run([sys.executable, "-c", THEME_CHILD, mode], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    deferred, plain = child("deferred"), child("plain")
    assert deferred["loaded_with_streamlit"] == []
    assert "plotly.graph_objects" in plain["loaded_with_streamlit"]  # what the deferral saves
    assert deferred["default"] == plain["default"] == "streamlit"
    assert deferred["template"] == plain["template"] and deferred["template"]["layout"]


WARM_UP_CHILD = """
import json, sys
from lastgood import ui
before = "plotly.graph_objects" in sys.modules or "pandas" in sys.modules
thread = ui.warm_up_plotly_pages(0.0)
assert ui.warm_up_plotly_pages(0.0) is thread  # once per process
thread.join(60)
import plotly.io as pio
print(json.dumps({"before": before, "after": ["pandas" in sys.modules, "plotly.graph_objects" in sys.modules],
                  "default": pio.templates.default}))
"""


def test_the_plotly_pages_imports_are_warmed_up_in_the_background() -> None:
    """The Overview leaves pandas and plotly out, then warms them up in a background thread so the
    first Timeline or Diff does not pay for them; Streamlit's theme is registered on the way."""
    done = subprocess.run([sys.executable, "-c", WARM_UP_CHILD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"before": False, "after": [True, True], "default": "streamlit"}
