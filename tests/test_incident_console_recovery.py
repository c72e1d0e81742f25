"""Done means: from the Overview to an applied "restore last good" (reason typed) in at most five
clicks, counted, in real Chromium against ``lastgood ui STORE --allow-write`` on a copy of the
sample store (research-005's two newest checkpoints are damaged, so its last good is not its head)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lastgood.readers.native.recovery import NativeRecovery
from tests.fixtures_browser import ROOT, free_port, stop_group, wait_for_health
from tests.helpers import SAMPLE_STORE, lastgood_cli

RUN = "research-005"
MAX_CLICKS = 5


class Clicks:
    """Every click the operator makes, counted (a click into the reason box too)."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def click(self, locator, what: str) -> None:
        locator.click()
        self.made.append(what)


@pytest.mark.browser
def test_overview_to_an_applied_restore_of_the_last_good_checkpoint_in_five_clicks(
        chromium_browser, tmp_path: Path) -> None:
    store, home = tmp_path / "agents", tmp_path / "home"
    shutil.copytree(SAMPLE_STORE, store)
    verified = lastgood_cli("verify", str(store), "--read-data", "--format", "json", home=home)
    assert verified.returncode == 1, verified.stderr  # the sample's damage: error findings
    run = next(r for r in json.loads(lastgood_cli("runs", str(store), "--run", RUN, "--format", "json",
                                                  home=home).stdout) if not r["namespace"])
    last_good, damaged_head = run["last_good"], run["head"]
    assert last_good and last_good != damaged_head

    port = free_port()
    env = dict(os.environ, LASTGOOD_HOME=str(home), PYTHONUNBUFFERED="1", LASTGOOD_OPERATOR="incident-tester")
    env.pop("LASTGOOD_ALLOW_WRITE", None)
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).with_name("lastgood")), "ui", str(store), "--port", str(port),
                                 "--allow-write"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(base, proc, timeout=60)
        context = chromium_browser.new_context(viewport={"width": 1440, "height": 900})
        page = context.new_page()
        page.set_default_timeout(30_000)
        clicks = Clicks()
        page.goto(base)  # the Overview
        page.get_by_text("writes enabled").first.wait_for()
        action = page.get_by_test_id("stHorizontalBlock").filter(has_text=f"in run {RUN}").filter(
            has_text="its head among them").first
        clicks.click(action.get_by_role("link", name="Restore last good…"), "Restore last good… (Overview)")

        page.get_by_role("heading", name="Preview (dry run)").wait_for()  # previewed at once: a dry run
        page.get_by_text("Side effects after the target").wait_for()
        preview = page.inner_text("[data-testid='stMain']")
        assert "Now the agent resumes from" in preview and "corrupt" in preview
        assert "After it resumes from" in preview
        reason = page.get_by_label("Reason (required; recorded in the journal)")
        clicks.click(reason, "the reason box")
        page.keyboard.type("head is corrupt: back to the last good checkpoint")
        page.keyboard.press("Enter")
        clicks.click(page.get_by_role("button", name="Apply…"), "Apply…")
        dialog = page.get_by_role("dialog")
        dialog.get_by_text("head is corrupt: back to the last good checkpoint").wait_for()  # the reason, repeated
        clicks.click(dialog.get_by_role("button", name="Confirm and apply"), "Confirm and apply")
        page.get_by_text("applied: run").wait_for()

        assert len(clicks.made) <= MAX_CLICKS, clicks.made
        entries = NativeRecovery(str(store)).journal_entries()
        assert [e["action"] for e in entries][-1:] == ["restore"]
        applied = entries[-1]
        assert applied["run_id"] == RUN and applied["target"] == last_good
        assert applied["previous_head"] == damaged_head and applied["operator"] == "incident-tester"
        assert applied["reason"] == "head is corrupt: back to the last good checkpoint"
        after = next(r for r in json.loads(lastgood_cli("runs", str(store), "--run", RUN, "--format", "json",
                                                        home=home).stdout) if not r["namespace"])
        assert after["head"] != damaged_head
        context.close()
    except Exception:
        print(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        stop_group(proc)
