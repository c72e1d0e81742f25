"""Screenshots of every dashboard page at 1440×900 into docs/ (docs/screenshot-<page>.png), taken
in real Chromium from ``lastgood ui`` as a user starts it, on a copy of the sample stores (fully
verified first, so no background check is half-way through a picture). Not part of the test suite:
run it after the pages change, then commit the pictures the README shows.

    .venv/bin/python benchmarks/screenshots.py            # every page
    .venv/bin/python benchmarks/screenshots.py diff sql    # some pages
    .venv/bin/python benchmarks/screenshots.py --out /tmp  # somewhere else (a review)

Each page opens on a link that shows what it is for: the Timeline on the damaged head of
``research-005`` (its two newest checkpoints are damaged), the Diff on its last good checkpoint
against its parent, Recovery on the dry-run preview of "restore last good" of that run (writes
enabled on the copy; nothing is applied), Integrity on every finding, the others as they open.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures_browser import CHROMIUM, CHROMIUM_ARGS, free_port, stop_group, wait_for_health  # noqa: E402

VIEWPORT = {"width": 1440, "height": 900}
RUN = "research-005"  # its last good checkpoint is not its head
WAIT_MS = 120_000
QUIET_S = 2.0  # the page did not change for this long: it is drawn


def lastgood(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LASTGOOD_HOME=str(home))
    return subprocess.run([str(Path(sys.executable).with_name("lastgood")), *args], env=env, text=True,
                          capture_output=True, timeout=900)


def prepare(base: Path) -> tuple[Path, Path, dict[str, Any]]:
    """Copies of the sample stores, fully verified; research-005's root run from ``lastgood runs``."""
    shutil.copytree(ROOT / "sample_data" / "agents", base / "agents")
    shutil.copy(ROOT / "sample_data" / "langgraph.sqlite", base / "langgraph.sqlite")
    home = base / "home"
    for store in (base / "agents", base / "langgraph.sqlite"):
        done = lastgood("verify", str(store), "--read-data", "--format", "json", home=home)
        if done.returncode not in (0, 1):  # 1: the sample's damage was found, as it should be
            raise SystemExit(f"verify {store} failed: {done.stderr.strip()}")
    runs = json.loads(lastgood("runs", str(base / "agents"), "--run", RUN, "--format", "json", home=home).stdout)
    return base / "agents", home, next(r for r in runs if not r["namespace"])


def parent_of(store: Path, home: Path, checkpoint: str) -> str:
    shown = json.loads(lastgood("show", str(store), checkpoint, "--format", "json", home=home).stdout)
    return shown["checkpoint"]["parent_id"]


def views(store: Path, home: Path, run: dict[str, Any]) -> dict[str, str]:
    """page -> the link it is photographed on."""
    s = {"store": str(store)}
    good = run["last_good"]
    return {
        "overview": "?" + urlencode(s),
        "timeline": "timeline?" + urlencode({**s, "run": RUN, "checkpoint": run["head"]}),
        "integrity": "integrity?" + urlencode(s),
        "diff": "diff?" + urlencode({**s, "a": parent_of(store, home, good), "b": good}),
        "recovery": "recovery?" + urlencode({**s, "run": RUN, "action": "restore-last-good"}),
        "storage": "storage?" + urlencode(s),
        "sql": "sql?" + urlencode(s),
    }


def settled(page: Any) -> None:
    """Until the app's script is not running and the page's text did not change for QUIET_S."""
    deadline, last, since = time.monotonic() + WAIT_MS / 1000, None, time.monotonic()
    while time.monotonic() < deadline:
        running = page.get_by_test_id("stApp").get_attribute("data-test-script-state") != "notRunning"
        now = page.inner_text("body")
        if running or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= QUIET_S:
            return
        time.sleep(0.25)
    raise TimeoutError("the page never settled")


def shoot(base_url: str, targets: dict[str, str], out: Path, height: int = VIEWPORT["height"]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name, link in targets.items():
                page = browser.new_context(viewport={**VIEWPORT, "height": height}).new_page()
                page.set_default_timeout(WAIT_MS)
                page.goto(f"{base_url}/{link}")
                page.get_by_role("heading").first.wait_for()
                settled(page)
                path = out / f"screenshot-{name}.png"
                page.screenshot(path=str(path))
                page.context.close()
                written.append(path)
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        finally:
            browser.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Screenshots of the dashboard's pages at 1440×900")
    parser.add_argument("pages", nargs="*", help="pages to photograph (default: every one)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for screenshot-<page>.png")
    parser.add_argument("--height", type=int, default=VIEWPORT["height"],
                        help="a taller window to see more of each page (a review; the README's are 900)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lastgood-shots-") as tmp:
        store, home, run = prepare(Path(tmp))
        targets = views(store, home, run)
        unknown = set(args.pages) - set(targets)
        if unknown:
            parser.error(f"unknown page(s): {', '.join(sorted(unknown))} (pages: {', '.join(targets)})")
        port = free_port()
        env = dict(os.environ, LASTGOOD_HOME=str(home), LASTGOOD_OPERATOR="screenshots")
        for name in ("LASTGOOD_ALLOW_WRITE", "LASTGOOD_STORES"):
            env.pop(name, None)
        command = [str(Path(sys.executable).with_name("lastgood")), "ui", str(store), str(Path(tmp) / "langgraph.sqlite"),
                   "--port", str(port), "--allow-write"]
        log = Path(tmp) / "ui.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        try:
            wait_for_health(f"http://127.0.0.1:{port}", proc, timeout=180)
            args.out.mkdir(parents=True, exist_ok=True)
            shoot(f"http://127.0.0.1:{port}", {k: v for k, v in targets.items() if not args.pages or k in args.pages},
                  args.out, args.height)
        finally:
            stop_group(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
