"""The Storage page under AppTest: what the store costs (bytes per agent/run, LangGraph tables and
channels, growth with a projection, stale runs), what a policy would reclaim per run (the same plan
`lastgood prune --dry-run` makes), and — only with --allow-write — prune with a reason and a
confirmation, then its undo, on real stores."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lastgood import retention
from lastgood.config import load_settings
from lastgood.readers.native.recovery import NativeRecovery
from lastgood.stores import index_store, open_catalog
from tests.helpers import ROOT, write_store

ENTRY = str(ROOT / "app" / "streamlit_app.py")
STORAGE = "../pages/storage.py"
TIMEOUT = 60


def _env(monkeypatch: pytest.MonkeyPatch, home: Path, url: str, write: bool = False) -> None:
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", url)
    monkeypatch.setenv("LASTGOOD_OPERATOR", "page-tester")
    if write:
        monkeypatch.setenv("LASTGOOD_ALLOW_WRITE", "1")
    else:
        monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)


def storage_app() -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    at.switch_page(STORAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _button(at: AppTest, label: str):
    return next(b for b in at.button if b.label == label)


def _metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture()
def native(tmp_path: Path) -> tuple[str, Path]:
    url, home = str(tmp_path / "store"), tmp_path / "home"
    write_store(url, runs=3, steps=6)
    index_store(open_catalog(load_settings(home)), url)
    return url, home


def _plan(url: str, home: Path, policy: retention.Policy) -> retention.PrunePlan:
    catalog = open_catalog(load_settings(home))
    return retention.plan_prune(catalog, index_store(catalog, url).store, policy)


def test_read_only_page_shows_the_costs_and_previews_but_cannot_prune(native: tuple[str, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    url, home = native
    _env(monkeypatch, home, url)
    at = storage_app()
    assert at.title[0].value == "Storage"
    assert _metric(at, "Checkpoints") == "18" and _metric(at, "Runs") == "3"
    assert any("Read-only" in i.value for i in at.info)
    runs = next(d.value for d in at.dataframe if "namespaces" in d.value.columns)
    assert sorted(runs["run_id"]) == ["run-0", "run-1", "run-2"] and runs["size_bytes"].gt(0).all()
    agents = next(d.value for d in at.dataframe if list(d.value.columns)[:2] == ["agent", "runs"])
    assert sorted(agents["agent"]) == ["agent-0", "agent-1"]
    assert any("No run has gone without a checkpoint for 30d" in c.value for c in at.caption)
    at.text_input(key="sg_stale_after").input("7d").run()  # the store was written on 2026-11-02
    assert any(c.value.startswith("3 stale runs") for c in at.caption), [c.value for c in at.caption]
    assert at.session_state["sg_keep_last"] == 10  # no saved policy: the form starts at keep-last 10
    at.number_input(key="sg_keep_last").set_value(2).run()
    _button(at, "Preview what it would reclaim (dry run)").click().run()
    assert not at.exception, [e.value for e in at.exception]
    plan = _plan(url, home, retention.Policy(last=2))
    assert at.subheader[-1].value == "Preview (dry run)"
    assert _metric(at, "Checkpoints that go") == f"{plan.summary['forget']:,}" and plan.summary["forget"] > 0
    per_run = next(d.value for d in at.dataframe if "goes_whole" in d.value.columns)
    assert dict(zip(per_run["run_id"], per_run["forget"])) == {r["run_id"]: r["forget"] for r in plan.per_run}
    at.text_input(key="sg_reason").input("tidy").run()
    prune = _button(at, "Prune…")
    assert prune.disabled and "allow-write" in (prune.help or "")
    assert _button(at, "Save this policy for the store").disabled
    at.session_state["sg_confirm"] = True  # a forged confirmation opens no dialog
    at.run()
    assert not [b for b in at.button if b.key == "sg_confirm_apply"]
    assert NativeRecovery(url).journal_entries() == []


def test_prune_with_reason_and_confirmation_then_undo(native: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    url, home = native
    _env(monkeypatch, home, url, write=True)
    at = storage_app()
    at.number_input(key="sg_keep_last").set_value(1).run()
    _button(at, "Preview what it would reclaim (dry run)").click().run()
    assert _button(at, "Prune…").disabled  # no reason yet
    at.text_input(key="sg_reason").input("keep the newest").run()
    _button(at, "Save this policy for the store").click().run()
    assert "Saved as this store's policy" in at.success[0].value
    _button(at, "Prune…").click().run()
    at.button(key="sg_confirm_apply").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "**Prune**" in at.success[0].value
    entries = NativeRecovery(url).journal_entries()
    assert [e["action"] for e in entries] == ["policy", "prune"] and entries[1]["operator"] == "page-tester"
    assert entries[1]["reason"] == "keep the newest"
    catalog = open_catalog(load_settings(home))
    kept = index_store(catalog, url).store
    assert len(retention.plan_prune(catalog, kept, retention.Policy(last=1)).checkpoints()) < 18
    assert _metric(at, "Checkpoints") != "18"  # the numbers were measured again
    assert _button(at, "Undo this prune").disabled
    at.text_input(key="sg_undo_reason").input("need them").run()
    _button(at, "Undo this prune").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "**Undo**" in at.success[0].value
    assert [e["action"] for e in NativeRecovery(url).journal_entries()] == ["policy", "prune", "undo"]
    assert _metric(at, "Checkpoints") == "18"
    at2 = storage_app()  # a new session: the form starts from the saved policy
    assert at2.session_state["sg_keep_last"] == 1
    assert any("Saved policy" in m.value for m in at2.markdown)


def test_langgraph_tables_channels_and_stale_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.langgraph_graphs import build_tools

    path, home = tmp_path / "lg.sqlite", tmp_path / "home"
    with sqlite3.connect(str(path), check_same_thread=False) as conn:
        for n in range(3):
            build_tools(SqliteSaver(conn), thread_id=f"t-{n}")
    _env(monkeypatch, home, str(path))
    at = storage_app()
    tables = next(d.value for d in at.dataframe if list(d.value.columns) == ["table", "rows", "size_bytes"])
    assert {"checkpoints", "writes"} <= set(tables["table"])
    with sqlite3.connect(str(path)) as conn:
        rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    assert int(tables.set_index("table").loc["checkpoints", "rows"]) == rows
    channels = next(d.value for d in at.dataframe if "channel" in d.value.columns)
    assert "messages" in set(channels["channel"])
    assert at.get("plotly_chart"), "the growth figure"


def test_a_format_that_cannot_prune_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, home = tmp_path / "model", tmp_path / "home"  # a save_pretrained folder: no resume pointer
    folder.mkdir()
    shutil.copyfile(ROOT / "sample_data" / "training" / "hf_trainer" / "checkpoint-16" / "model.safetensors",
                    folder / "model.safetensors")
    _env(monkeypatch, home, str(folder), write=True)
    at = storage_app()
    preview = _button(at, "Preview what it would reclaim (dry run)")
    assert preview.disabled and "cannot prune" in (preview.help or "")
    assert any("cannot prune" in c.value for c in at.caption)


def test_an_agent_session_store_prunes_stale_sessions_whole_from_the_page(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """An ADK SQLite DB (written by ADK's own DatabaseSessionService, sample_data/): keep-last keeps
    whole sessions (each event needs the one before it); "whole runs untouched for" takes stale ones."""
    url, home = str(tmp_path / "adk.sqlite"), tmp_path / "home"
    shutil.copyfile(ROOT / "sample_data" / "adk.sqlite", url)
    _env(monkeypatch, home, url, write=True)
    at = storage_app()
    total = _metric(at, "Checkpoints")
    at.number_input(key="sg_keep_last").set_value(1).run()
    _button(at, "Preview what it would reclaim (dry run)").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert _metric(at, "Checkpoints that go") == "0"  # a session's history is all needed
    at.text_input(key="sg_keep_runs_within").input("1d").run()  # the sample was written weeks ago
    _button(at, "Preview what it would reclaim (dry run)").click().run()
    assert _metric(at, "Checkpoints that go") == total
    at.text_input(key="sg_reason").input("stale sessions").run()
    _button(at, "Prune…").click().run()
    at.button(key="sg_confirm_apply").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "**Prune**" in at.success[0].value
    assert sqlite3.connect(url).execute("SELECT count(*) FROM events").fetchone()[0] == 0
    at.text_input(key="sg_undo_reason").input("need them").run()
    _button(at, "Undo this prune").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "**Undo**" in at.success[0].value
    assert _metric(at, "Checkpoints") == total
    assert sqlite3.connect(url).execute("SELECT count(*) FROM events").fetchone()[0] == int(total)
