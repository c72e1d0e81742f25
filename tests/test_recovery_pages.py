"""The Recovery page under AppTest (read-only blocks writes; preview → reason → confirm →
apply → undo) and one Playwright flow in real Chromium against `lastgood ui --allow-write`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.display.numbers import short_id
from lastgood.readers.native.recovery import NativeRecovery
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import lastgood_cli
from tests.fixtures_browser import (
    ROOT,
    SECRET,
    DemoStore,
    build_demo_store,
    demo_state,
    free_port,
    stop_group,
    wait_for_health,
)

ENTRY = str(ROOT / "app" / "streamlit_app.py")
RECOVERY = "../pages/recovery.py"
TIMELINE = "../pages/timeline.py"
TIMEOUT = 60


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DemoStore:
    demo = build_demo_store(tmp_path / "store", tmp_path / "home", damage=False)
    monkeypatch.setenv("LASTGOOD_HOME", str(demo.home))
    monkeypatch.setenv("LASTGOOD_STORES", demo.url)
    monkeypatch.setenv("LASTGOOD_OPERATOR", "page-tester")
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    return demo


def recovery_app(**params: str) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(RECOVERY).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def apply_button(at: AppTest):
    return next(b for b in at.button if b.label == "Apply…")


def test_read_only_mode_previews_but_blocks_writes(store: DemoStore) -> None:
    at = recovery_app(action="restore", run="run-alpha", target=store.of_run("run-alpha")[1].checkpoint_id)
    assert at.title[0].value == "Recovery"
    assert any("Read-only" in i.value for i in at.info)
    assert at.subheader[0].value == "Preview (dry run)"  # arrived with ?action=…: previewed at once
    at.text_input(key="rc_reason").input("test").run()
    button = apply_button(at)
    assert button.disabled and "allow-write" in (button.help or "")
    at.session_state["rc_confirm"] = True  # even a forged confirmation shows no apply dialog
    at.run()
    assert not at.exception and not [b for b in at.button if b.key == "rc_confirm_apply"]
    assert not NativeRecovery(store.url).journal_entries()
    assert SECRET not in str(at._tree)


def test_preview_reason_confirm_apply_then_undo(store: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LASTGOOD_ALLOW_WRITE", "1")
    target = store.of_run("run-beta")[2]
    at = recovery_app(action="rollback", run="run-beta", target=target.checkpoint_id)
    plan = " ".join(m.value for m in at.markdown)
    assert "**Superseded**: 3 later checkpoints" in plan  # steps 3, 4, 5 become superseded
    assert "**After** it resumes from step 2 · " in plan and "**Now** the agent resumes from step 5 · " in plan
    assert apply_button(at).disabled  # no reason yet
    at.text_input(key="rc_reason").input("the error at step 3").run()
    apply_button(at).click().run()
    assert not at.exception, [e.value for e in at.exception]
    at.button(key="rc_confirm_apply").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert "rollback" in at.success[0].value
    writer = NativeWriter(store.url, create=False)
    assert writer.load_head_state("run-beta") == demo_state("run-beta", 2)
    entries = NativeRecovery(store.url).journal_entries()
    assert [e["action"] for e in entries] == ["rollback"] and entries[0]["operator"] == "page-tester"

    next(b for b in at.button if b.label == "Undo this action").click().run()
    assert at.session_state["rc_action"] == "undo" and at.subheader[0].value == "Preview (dry run)"
    at.text_input(key="rc_reason").input("false alarm").run()
    apply_button(at).click().run()
    at.button(key="rc_confirm_apply").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert writer.load_head_state("run-beta") == demo_state("run-beta", 5)
    entries = NativeRecovery(store.url).journal_entries()
    assert [e["action"] for e in entries] == ["rollback", "undo"] and entries[1]["undo_of"] == entries[0]["id"]
    journal = next(d.value for d in at.dataframe if "undo_of" in d.value.columns)
    assert list(journal["action"]) == ["undo", "rollback"]
    assert str(journal["time"].dtype).startswith("datetime64") and journal["time"].notna().all()
    at.session_state["rc_action"] = "undo"
    at.run()
    offered = at.selectbox(key="rc_undo_of").options  # an undone action is not offered again
    assert len(offered) == 1 and short_id(entries[1]["id"]) in offered[0]  # actions by their short ids
    assert short_id(entries[0]["id"]) not in offered[0]


def test_a_link_opens_its_own_store_and_never_previews_another_target(
        store: DemoStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    other = build_demo_store(tmp_path / "other", store.home, damage=False)
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([store.url, other.url]))
    target = other.of_run("run-beta")[2].checkpoint_id  # ids differ between the two stores
    at = recovery_app(store=other.url, action="quarantine", run="run-beta", target=target)
    assert at.session_state["lastgood_store"] == other.url and at.session_state["rc_target"] == target
    assert at.subheader[0].value == "Preview (dry run)" and not at.error
    assert any(short_id(target) in m.value for m in at.markdown)  # the preview names the checkpoint it marks
    assert not any("Side effects" in m.value for m in at.markdown)  # a mark rewinds nothing
    wrong = recovery_app(store=store.url, action="quarantine", run="run-beta", target=target)
    assert wrong.session_state["lastgood_store"] == store.url
    assert any("The link named a checkpoint" in e.value for e in wrong.error)
    assert not any(target in e.value for e in wrong.error)  # what a link named is never echoed
    assert not [s for s in wrong.subheader if s.value == "Preview (dry run)"]  # nothing previewed
    wrong.run()  # a rerun (the background check's end) keeps saying it
    assert any("The link named a checkpoint" in e.value for e in wrong.error)


def test_a_quarantined_target_needs_the_override_which_is_for_one_action(
        store: DemoStore, monkeypatch: pytest.MonkeyPatch) -> None:
    target = store.of_run("run-beta")[1].checkpoint_id
    done = lastgood_cli("quarantine", store.url, target, "--reason", "bad tool output", "--yes", home=store.home)
    assert done.returncode == 0, done.stderr
    monkeypatch.setenv("LASTGOOD_ALLOW_WRITE", "1")
    at = recovery_app(action="restore", run="run-beta", target=target)
    refused = " ".join(w.value for w in at.warning)
    assert "**quarantined**" in refused and "bad tool output" in refused  # why, before any preview
    assert not [s for s in at.subheader if s.value == "Preview (dry run)"]  # not previewed until overridden
    at.checkbox(key="rc_force").check().run()  # the override previews at once
    assert [s.value for s in at.subheader].count("Preview (dry run)") == 1
    assert any("forced" in w.value for w in at.warning)
    at.text_input(key="rc_reason").input("forced on purpose").run()
    apply_button(at).click().run()
    dialog = " ".join(m.value for m in at.markdown) + " ".join(w.value for w in at.warning)
    assert "forced" in dialog  # the confirmation repeats it
    at.button(key="rc_confirm_apply").click().run()
    assert not at.exception and "restore" in at.success[0].value
    assert at.checkbox(key="rc_force").value is False  # unticked after the action


def test_restore_is_not_offered_up_front_on_a_corrupt_checkpoint(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    demo = build_demo_store(tmp_path / "store", tmp_path / "home")  # run-gamma's newest: its blob deleted
    monkeypatch.setenv("LASTGOOD_HOME", str(demo.home))
    monkeypatch.setenv("LASTGOOD_STORES", demo.url)
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.switch_page(TIMELINE).run()
    at.selectbox(key="tl_run").select("run-gamma").run()
    at.selectbox(key="tl_ckpt").select(demo.damaged.checkpoint_id).run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [link.proto.label for link in at.get("page_link")]
    assert "Restore this" not in labels and "Rollback to here" not in labels  # not offered up front
    assert "Restore this (override)" in labels and "Quarantine" in labels  # behind "Restore anyway…"
    assert any("This checkpoint is **corrupt**" in c.value and "does not exist" in c.value for c in at.caption)


def test_timeline_detail_links_to_recovery_actions(store: DemoStore) -> None:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.switch_page(TIMELINE).run()
    chosen = store.of_run("run-alpha")[2]
    at.selectbox(key="tl_run").select("run-alpha").run()
    at.selectbox(key="tl_ckpt").select(chosen.checkpoint_id).run()
    assert not at.exception, [e.value for e in at.exception]
    links = {link.proto.label: link.proto for link in at.get("page_link")}
    assert {"Restore this", "Rollback to here", "Quarantine"} <= set(links)
    assert chosen.checkpoint_id in str(links["Restore this"].query_string)


# ---- Playwright ------------------------------------------------------------------------


@pytest.mark.browser
def test_restore_last_good_in_chromium_then_undo(store: DemoStore, chromium_browser, tmp_path: Path) -> None:
    writer = NativeWriter(store.url, create=False)
    bad = writer.save("run-alpha", {"broken": True})  # a bad head, quarantined by hand
    done = lastgood_cli("quarantine", store.url, bad.checkpoint_id, "--reason", "garbage", "--yes",
                        home=store.home)
    assert done.returncode == 0, done.stderr
    port = free_port()
    env = dict(os.environ, LASTGOOD_HOME=str(store.home), PYTHONUNBUFFERED="1",
               LASTGOOD_OPERATOR="browser-tester")
    env.pop("LASTGOOD_ALLOW_WRITE", None)
    command = [str(Path(sys.executable).with_name("lastgood")), "ui", store.url, "--port", str(port),
               "--allow-write"]
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc, timeout=60)
        context = chromium_browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(f"{base}/recovery?action=restore-last-good&run=run-alpha")
        page.get_by_text("Preview (dry run)").first.wait_for()
        page.get_by_text("writes enabled").first.wait_for()
        page.get_by_label("Reason (required; recorded in the journal)").fill("head is broken")
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Apply…").click()
        page.get_by_role("button", name="Confirm and apply").click()
        page.get_by_text("applied: run").wait_for()
        assert writer.load_head_state("run-alpha") == demo_state("run-alpha", 5)
        page.get_by_role("button", name="Undo this action").click()
        # the undo moves the head back to the quarantined checkpoint: refused until overridden, with why
        page.get_by_text("is quarantined", exact=False).first.wait_for()
        assert "garbage" in page.inner_text("body")
        page.get_by_text("Override: restore it although it is quarantined").click()
        page.get_by_text("Preview (dry run)").first.wait_for()
        page.get_by_label("Reason (required; recorded in the journal)").fill("it was fine after all")
        page.keyboard.press("Enter")
        page.get_by_role("button", name="Apply…").click()
        page.get_by_role("button", name="Confirm and apply").click()
        page.get_by_text("undo").first.wait_for()
        page.get_by_text("applied: run").wait_for()
        assert writer.load_head_state("run-alpha") == {"broken": True}
        entries = NativeRecovery(store.url).journal_entries()
        assert [e["action"] for e in entries] == ["quarantine", "restore", "undo"]
        assert entries[1]["operator"] == "browser-tester" and entries[1]["reason"] == "head is broken"
        assert SECRET not in page.inner_text("body")
        context.close()
    except Exception:
        print(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        stop_group(proc)


def test_the_form_starts_on_the_latest_run_and_its_last_good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No link: the most recent run, and as the target of a restore its last good checkpoint (the
    newest one is damaged here), not the newest whatever its state."""
    demo = build_demo_store(tmp_path / "store", tmp_path / "home")
    monkeypatch.setenv("LASTGOOD_HOME", str(demo.home))
    monkeypatch.setenv("LASTGOOD_STORES", demo.url)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    gamma = demo.of_run("run-gamma")
    assert demo.damaged == gamma[-1]
    at = recovery_app()
    assert at.selectbox(key="rc_run").value == "run-gamma"  # the most recent run
    assert at.selectbox(key="rc_target").value == gamma[-2].checkpoint_id
    at.selectbox(key="rc_run").select("run-alpha").run()
    assert at.selectbox(key="rc_target").value == demo.of_run("run-alpha")[-1].checkpoint_id


def test_the_store_and_each_pages_selection_survive_a_visit_to_another_page(
        store: DemoStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    other = build_demo_store(tmp_path / "other", store.home, damage=False)
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([store.url, other.url]))
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.sidebar.selectbox(key="lastgood_store").select(other.url).run()
    at.switch_page(TIMELINE).run()
    assert at.session_state["lastgood_store"] == other.url
    at.selectbox(key="tl_run").select("run-beta").run()
    at.text_input(key="tl_ref").input(other.of_run("run-beta")[2].checkpoint_id[:20]).run()
    at.switch_page("../pages/diff.py").run()
    at.selectbox(key="diff_run_a").select("run-alpha").run()
    chosen = (at.session_state["diff_ckpt_a"], at.session_state["diff_ckpt_b"])
    assert chosen[0] != chosen[1]
    at.switch_page("../pages/overview.py").run()
    assert at.session_state["lastgood_store"] == other.url
    at.switch_page(TIMELINE).run()
    assert at.session_state["tl_run"] == "run-beta"
    assert at.session_state["tl_ref"] == other.of_run("run-beta")[2].checkpoint_id[:20]
    at.switch_page("../pages/diff.py").run()
    assert (at.session_state["diff_ckpt_a"], at.session_state["diff_ckpt_b"]) == chosen
    assert not at.exception and not at.warning, [w.value for w in at.warning]


# ---- secrets in pages (a secret-shaped run id; a typed reason; link parameters) -------------------


def test_a_secret_shaped_run_never_reaches_an_action_a_link_or_an_echo(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose id holds a secret and whose head is damaged: the Overview's suggested action and its
    "Restore last good…" link, the Integrity page's link and the Recovery page opened from it name the
    run by its handle (``key:…``) and never show the secret; a link naming a run the store does not
    have is refused without echoing it; a typed reason with URLs is shown as plain text (never a link)."""
    from datetime import timedelta
    from urllib.parse import parse_qs

    from lastgood.index.queries import run_handle
    from tests.helpers import T0

    run = f"deploy-{SECRET}"
    store, home = tmp_path / "store", tmp_path / "home"
    writer = NativeWriter(str(store), codec="json")
    saved = [writer.save(run, {"step": step}, step=step, created_at=T0 + timedelta(minutes=step)) for step in range(3)]
    (store / saved[-1].location).unlink()  # the head's blob gone: restore the last good one
    assert lastgood_cli("verify", str(store), "--read-data", home=home).returncode == 1
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", str(store))
    monkeypatch.setenv("LASTGOOD_ALLOW_WRITE", "1")

    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    action = next(m.value for m in at.markdown if "its head among them" in m.value)
    restore = next(p.proto for p in at.get("page_link") if p.proto.label == "Restore last good…")
    overview_link = parse_qs(restore.query_string)
    assert overview_link["run"] == [run_handle(run)] and SECRET not in action + restore.query_string
    assert "[redacted]" in action or "deploy-" in action

    at.switch_page("../pages/integrity.py").run()
    assert not at.exception, [e.value for e in at.exception]
    restore = next(p.proto for p in at.get("page_link") if p.proto.label == "Restore last good…")
    assert parse_qs(restore.query_string)["run"] == [run_handle(run)] and SECRET not in restore.query_string
    assert SECRET not in str(at._tree)

    at = recovery_app(**{k: v[0] for k, v in overview_link.items()})
    assert [s.value for s in at.subheader].count("Preview (dry run)") == 1  # the handle names the run
    reason = "rolled back, see https://evil.example/x and [this](https://evil.example/y) <b>now</b>"
    at.text_input(key="rc_reason").input(reason).run()
    apply_button(at).click().run()
    assert reason in [t.value for t in at.text]  # the reason, repeated as plain text
    assert not any("https://evil.example" in m.value for m in at.markdown)  # never markdown: no link
    assert SECRET not in str(at._tree)

    unknown = recovery_app(action="restore-last-good", run=f"other-{SECRET}")
    assert any("The link named a run" in e.value for e in unknown.error)
    assert SECRET not in str(unknown._tree) and f"other-{SECRET}" not in str(unknown._tree)
