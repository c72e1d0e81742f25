"""The Integrity page (AppTest) agrees with `lastgood verify`, `ls` and `runs`; re-verify runs in the
background with progress; findings link to their checkpoint on the Timeline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.integrity import background
from lastgood.config import load_settings
from lastgood.stores import normalize_url
from tests.fixtures_browser import page_env
from tests.helpers import SAMPLE_STORE, lastgood_cli

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
INTEGRITY = "../pages/integrity.py"
TIMELINE = "../pages/timeline.py"


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    """A copy of the sample store with a full read done by the CLI, and what the CLI reported."""
    base = tmp_path_factory.mktemp("integrity_page")
    store, home = base / "agents", base / "home"
    shutil.copytree(SAMPLE_STORE, store)
    done = lastgood_cli("verify", str(store), "--read-data", "--format", "json", home=home)
    assert done.returncode == 1, done.stderr
    runs = lastgood_cli("runs", str(store), "--format", "json", home=home)
    ls = lastgood_cli("ls", str(store), "--format", "json", home=home)
    return store, home, {"verify": json.loads(done.stdout), "runs": json.loads(runs.stdout),
                         "ls": json.loads(ls.stdout)}


@pytest.fixture()
def app_env(checked: tuple[Path, Path, dict], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, dict]:
    store, home, _ = checked
    page_env(monkeypatch, home, json.dumps([normalize_url(str(store))]))
    return checked


def _run(page: str, **params: str) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _table(at: AppTest, *columns: str):
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value
    raise AssertionError(f"no table with {columns}")


def test_page_agrees_with_verify_ls_and_runs(app_env: tuple[Path, Path, dict]) -> None:
    _, _, cli = app_env
    at = _run(INTEGRITY)
    assert at.title[0].value == "Integrity"
    findings = _table(at, "severity", "check", "checkpoint_id", "open")
    page = set(zip(findings["checkpoint_id"], findings["check"], findings["severity"]))
    reported = {(f["checkpoint_id"], f["check"], f["severity"]) for f in cli["verify"]["findings"]}
    on_store = {f for f in reported if f[0] is None}  # the malformed catalog line: about the store itself
    assert page == reported - on_store and len(page) >= 10 and on_store
    assert findings["message"].notna().all() and findings["run_id"].notna().all()  # never a row of None cells
    store_section = " ".join(e.value for e in at.error)
    assert all(check in store_section for _, check, _ in on_store)
    assert "malformed catalog line" in store_section
    errors = {f["checkpoint_id"] for f in cli["verify"]["findings"] if f["severity"] == "error"} - {None}
    assert errors == {r["checkpoint_id"] for r in cli["ls"] if r["status"] != "ok"}
    runs = _table(at, "run_id", "last_good", "unverified", "health", "superseded")
    assert dict(zip(runs["run_id"], runs["last_good"])) == {r["run_id"]: r["last_good"] for r in cli["runs"]}
    assert dict(zip(runs["run_id"], runs["errors"])) == {r["run_id"]: r["errors"] for r in cli["runs"]}
    assert int(runs["unverified"].sum()) == 0
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Errors"] == str(sum(1 for f in cli["verify"]["findings"] if f["severity"] == "error"))
    damaged = {r["run_id"] for r in cli["runs"] if r["health"] == "damaged"}
    assert metrics["Damaged runs"] == f"{len(damaged)} of {len({r['run_id'] for r in cli['runs']})}"
    assert metrics["Damaged checkpoints"] == str(sum(1 for r in cli["ls"] if r["status"] in ("corrupt", "incomplete")))
    by_check = _table(at, "check", "findings")
    assert int(by_check["findings"].sum()) == len(reported)
    link = next(u for u in findings["open"] if isinstance(u, str))
    query = parse_qs(urlparse(link).query)
    assert urlparse(link).path == "timeline" and set(query) == {"store", "run", "checkpoint"}
    restore = [p for p in at.get("page_link") if "Restore last good" in p.proto.label]
    assert restore and restore[0].proto.disabled and "--allow-write" in restore[0].proto.help


def test_the_overview_counts_what_the_integrity_page_and_the_cli_count(app_env: tuple[Path, Path, dict]) -> None:
    """One set of numbers: the Overview's metrics and health line, the Integrity page's metrics and
    `lastgood verify`/`runs`/`ls` agree; the finding about the store itself (the malformed catalog
    line) is a suggested action on the Overview, in words."""
    _, _, cli = app_env
    found, ls = cli["verify"]["findings"], cli["ls"]
    errors = sum(1 for f in found if f["severity"] == "error")
    on_store = sum(1 for f in found if f["severity"] == "error" and f["checkpoint_id"] is None)
    damaged_runs = len({r["run_id"] for r in cli["runs"] if r["health"] == "damaged"})
    runs = len({r["run_id"] for r in cli["runs"]})
    damaged = sum(1 for r in ls if r["status"] in ("corrupt", "incomplete"))
    overview = AppTest.from_file(ENTRY, default_timeout=60).run()
    assert not overview.exception, [e.value for e in overview.exception]
    metrics = {m.label: m.value for m in overview.metric}
    assert metrics["Corrupt"] == str(sum(1 for r in ls if r["status"] == "corrupt"))
    assert metrics["Checkpoints"] == f"{len(ls):,}" and metrics["Runs"] == str(runs)
    line = f"{damaged_runs} of {runs} runs damaged · {damaged} damaged checkpoints · {errors} errors ({on_store} about"
    assert any(line in c.value for c in overview.caption), [c.value for c in overview.caption]
    assert any("Store-level error" in m.value and "malformed catalog line" in m.value for m in overview.markdown)
    overview.switch_page(INTEGRITY).run()
    metrics = {m.label: m.value for m in overview.metric}
    assert (metrics["Errors"], metrics["Damaged runs"], metrics["Damaged checkpoints"]) == \
        (str(errors), f"{damaged_runs} of {runs}", str(damaged))


def test_while_a_check_runs_the_overview_and_integrity_say_what_is_checked_so_far(
        app_env: tuple[Path, Path, dict]) -> None:
    """A background check in progress: the Overview's numbers carry a note of how much is checked so
    far (in the store's terms), the Integrity page a progress bar saying the same, instead of counts
    that silently change."""
    store, _, cli = app_env
    total = len(cli["ls"])
    index_path, url = str(load_settings().index_path), normalize_url(str(store))
    job = background.start(index_path, url, "structure", delay=60)  # running, nothing checked yet
    try:
        at = AppTest.from_file(ENTRY, default_timeout=60).run()
        assert not at.exception, [e.value for e in at.exception]
        note = f"structure checked: 0 of {total:,} checkpoints; counts will change"
        assert any(note in c.value and "the numbers above" in c.value for c in at.caption), [c.value for c in at.caption]
        at.switch_page(INTEGRITY).run()
        assert any(note in p.proto.text for p in at.get("progress")), [p.proto.text for p in at.get("progress")]
    finally:
        job.cancel()
        background.wait(index_path, url, timeout=30)


def test_filters_narrow_the_findings(app_env: tuple[Path, Path, dict]) -> None:
    at = _run(INTEGRITY)
    at.multiselect(key="integrity_filter_check").select("sha256-mismatch").run()
    findings = _table(at, "severity", "check", "open")
    assert set(findings["check"]) == {"sha256-mismatch"} and len(findings) == 1


def test_full_read_runs_in_the_background_with_progress(app_env: tuple[Path, Path, dict]) -> None:
    store, home, cli = app_env
    at = _run(INTEGRITY)
    next(b for b in at.button if b.label == "Full read").click().run()
    assert not at.exception
    index_path = str(load_settings().index_path)
    job = background.wait(index_path, normalize_url(str(store)), timeout=120)
    assert job is not None and job.state == "done" and job.depth == "data"
    assert job.done == job.total == sum(r["checkpoints"] for r in cli["runs"])
    assert job.errors_found >= 3  # data findings arrive as they are found
    at.run()
    total = sum(r["checkpoints"] for r in cli["runs"])
    done = next(s.value for s in at.success if "full read done" in s.value)
    errors = sum(1 for f in cli["verify"]["findings"] if f["severity"] == "error")
    assert f"data checked: {total:,} of {total:,} checkpoints" in done  # in the store's terms, not the job's
    assert f"{errors} errors" in done and {m.label: m.value for m in at.metric}["Errors"] == str(errors)


def test_a_running_check_says_what_is_checked_so_far() -> None:
    from lastgood.display.numbers import check_progress

    # the dashboard's check of the never-read checkpoints: those read before count as checked
    assert check_progress("data", 1000, 2186, 2386, True, True) == \
        "data checked: 1,200 of 2,386 checkpoints; counts will change"
    assert check_progress("data", 2386, 2386, 2386, False, False) == "data checked: 2,386 of 2,386 checkpoints"
    assert check_progress("structure", 0, None, 10, False, True).startswith("structure checked: 0 of 10")
    assert check_progress("data", 2386, 2386, 2386, False, True) == \
        "data checked: 2,386 of 2,386 checkpoints; recording the results, counts will change"


def test_a_finding_link_opens_its_checkpoint_on_the_timeline(app_env: tuple[Path, Path, dict]) -> None:
    store, _, cli = app_env
    finding = next(f for f in cli["verify"]["findings"] if f["check"] == "sha256-mismatch")
    at = _run(TIMELINE, store=normalize_url(str(store)), run=finding["run_id"],
              checkpoint=finding["checkpoint_id"])
    assert at.selectbox(key="tl_run").value == finding["run_id"]
    selected = at.selectbox(key="tl_ckpt").value or at.text_input(key="tl_ref").value
    assert selected == finding["checkpoint_id"]  # landed on the problem itself, selected
    assert any(finding["checkpoint_id"] in s.value for s in at.subheader)


def test_the_dashboard_reads_never_read_blobs_in_the_background(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store, home = tmp_path / "agents", tmp_path / "home"
    shutil.copytree(SAMPLE_STORE, store)
    done = lastgood_cli("index", str(store), "--check", "structure", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([normalize_url(str(store))]))
    monkeypatch.setenv("LASTGOOD_BACKGROUND_CHECK", "1")
    at = AppTest.from_file(ENTRY, default_timeout=60).run()  # the Overview, as `lastgood ui` opens it
    assert not at.exception, [e.value for e in at.exception]
    job = background.wait(str(load_settings().index_path), normalize_url(str(store)), timeout=120)
    assert job is not None and job.depth == "data" and job.only_unverified and job.state == "done"
    at.run()
    total = sum(r["checkpoints"] for r in json.loads(lastgood_cli("runs", str(store), "--format", "json",
                                                                  home=home).stdout))
    # the store's numbers, as the page under it counts them (not the job's own count of what it found)
    assert any(f"data checked: {total:,} of {total:,} checkpoints" in c.value and "runs damaged" in c.value
               for c in at.sidebar.caption)
    runs = json.loads(lastgood_cli("runs", str(store), "--format", "json", home=home).stdout)
    assert sum(r["unverified"] for r in runs) == 0 and all(r["last_good"] for r in runs)
    found = json.loads(lastgood_cli("verify", str(store), "--format", "json", home=home).stdout)
    assert {"sha256-mismatch", "undecodable", "chain-broken"} <= {f["check"] for f in found["findings"]}


def test_timeline_draws_unverified_checkpoints_hollow_and_damaged_ones_as_x(tmp_path: Path) -> None:
    from lastgood.index import queries
    from lastgood.index.catalog import Catalog
    from lastgood.display.figures import TimelineData, timeline_figure
    from lastgood.stores import index_store
    from lastgood.integrity.verify import verify_store

    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(SAMPLE_STORE), check="structure")
    sid = summary.store.store_id

    def symbols() -> dict[str, set[str]]:
        points, _ = queries.timeline(catalog, sid, run_id="trading-003")
        fig = timeline_figure(TimelineData(points, False, points[:0].assign(kind=[]), len(points)), True, "step")
        found: dict[str, set[str]] = {}
        for trace in fig.data:
            for cid, symbol in zip([c[0] for c in trace.customdata], trace.marker.symbol):
                found.setdefault(symbol, set()).add(cid)
        return found

    before = symbols()
    assert set(before) == {"circle-open"}  # nothing read yet: no checkpoint drawn as known good
    verify_store(catalog, sid, summary.store.reader, read_data=True)
    after = symbols()
    assert after.keys() == {"circle", "x"} and len(after["x"]) == 1  # the sha256 mismatch of trading-003


def test_a_secret_shaped_run_links_by_a_non_secret_handle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL is logged and sent as Referer: a finding of a run whose id is secret-shaped links by the
    index's handle (``key``), never by the id; the link opens that checkpoint and no page shows the secret."""
    from datetime import timedelta

    from lastgood.readers.native.writer import NativeWriter
    from tests.helpers import SECRET, T0
    from tests.test_pages import rendered_text

    store, home = tmp_path / "store", tmp_path / "home"
    writer = NativeWriter(str(store), codec="json")
    saved = [writer.save(run, {"step": step}, step=step, created_at=T0 + timedelta(minutes=step))
             for run in (SECRET, "plain-run") for step in range(3)]
    for damaged in (saved[1], saved[4]):
        (store / damaged.location).unlink()
    done = lastgood_cli("index", str(store), "--format", "json", home=home)  # a data check: blobs missing
    assert done.returncode == 0 and SECRET not in done.stdout, done.stderr
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([normalize_url(str(store))]))
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    at = _run(INTEGRITY)
    findings = _table(at, "severity", "check", "checkpoint_id", "open")
    links = {c: parse_qs(urlparse(u).query) for c, u in zip(findings["checkpoint_id"], findings["open"])
             if isinstance(u, str)}
    secret_link, plain_link = links[saved[1].checkpoint_id], links[saved[4].checkpoint_id]
    assert set(secret_link) <= {"store", "run", "key"} and "key" in secret_link and SECRET not in str(links)
    assert all(v.startswith("key:") for v in secret_link.get("run", []))  # the run by its handle
    assert plain_link["run"] == ["plain-run"] and plain_link["checkpoint"] == [saved[4].checkpoint_id]
    assert SECRET not in rendered_text(at)

    opened = _run(TIMELINE, store=secret_link["store"][0], key=secret_link["key"][0])
    assert opened.text_input(key="tl_ref").value == secret_link["key"][0]
    assert any(saved[1].checkpoint_id in s.value for s in opened.subheader)  # the damaged checkpoint
    assert "does not exist" in rendered_text(opened)  # its finding
    assert SECRET not in rendered_text(opened)
    shown = lastgood_cli("show", str(store), secret_link["key"][0], "--format", "json", home=home)
    assert shown.returncode == 0 and json.loads(shown.stdout)["checkpoint"]["checkpoint_id"] == saved[1].checkpoint_id


def test_runs_are_counted_as_the_overview_counts_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = SAMPLE_STORE.parent / "langgraph.sqlite"  # threads with subgraph namespaces
    runs = json.loads(lastgood_cli("runs", str(db), "--format", "json", home=tmp_path / "h").stdout)
    threads = {r["run_id"] for r in runs}
    assert len(runs) > len(threads)  # namespaces are rows of their own
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "h"))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(db)]))
    at = AppTest.from_file(ENTRY, default_timeout=60).run()
    overview_runs = {m.label: m.value for m in at.metric}["Runs"]
    at.switch_page(INTEGRITY).run()
    metrics = {m.label: m.value for m in at.metric}
    assert overview_runs == str(len(threads))
    assert metrics["Damaged runs"].endswith(f"of {len(threads)}")
    assert metrics["Runs with a last good"] == f"{sum(1 for r in runs if not r['namespace'] and r['last_good'])} of {len(threads)}"


def test_a_secret_shaped_run_is_picked_and_drawn_on_the_timeline_by_its_handle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose id is secret-shaped is listed by its handle (never a mask shared by every such
    run): picking it draws its own checkpoints, whichever run the picker starts on."""
    from datetime import timedelta

    from lastgood.index.queries import run_handle
    from lastgood.readers.native.writer import NativeWriter
    from tests.helpers import SECRET, T0
    from tests.test_pages import rendered_text

    store, home = tmp_path / "store", tmp_path / "home"
    writer = NativeWriter(str(store), codec="json")
    for run, count in ((SECRET, 3), (SECRET + "-2", 5), ("plain-run", 2)):
        for step in range(count):
            writer.save(run, {"step": step}, step=step, created_at=T0 + timedelta(minutes=step))
    assert lastgood_cli("index", str(store), home=home).returncode == 0
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([normalize_url(str(store))]))
    at = _run(TIMELINE)
    picker = at.selectbox(key="tl_run")
    for run, count in ((SECRET, 3), (SECRET + "-2", 5), ("plain-run", 2)):
        shown = run if run == "plain-run" else run_handle(run)
        assert shown in picker.options or any(shown in o for o in picker.options), (shown, picker.options)
        at.selectbox(key="tl_run").set_value(shown).run()
        assert any(f"{count} checkpoint(s)" in c.value for c in at.caption), run
        assert SECRET not in rendered_text(at)
