"""A demo native store for the page tests, and a real Streamlit server for the browser tests.

``build_demo_store`` writes a small store with NativeWriter: several runs over
two agents, chat messages, a secret (``tools.api_key``) that must never reach
a page, an error event, and one damaged checkpoint (its blob deleted after a
first index, then a full re-index). ``streamlit_server`` runs
``lastgood ui STORE --port N`` (the real entry point) in its own process group against it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from lastgood.config import load_settings
from lastgood.cli.output import short_bytes
from lastgood.stores import index_store, open_catalog
from lastgood.readers.native.writer import NativeWriter, SavedCheckpoint

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-test-SECRET-7f3a9c2e5b8d1f4a6c0e"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
CHROMIUM_HINT = (f"Chromium not found at {CHROMIUM}: install Debian's package with "
                 "`apt-get install -y chromium` (Playwright's own browser download does not work here)")
RUNS = {"run-alpha": "planner", "run-beta": "planner", "run-gamma": "coder"}
START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@dataclass
class DemoStore:
    root: Path
    home: Path
    saved: list[SavedCheckpoint] = field(default_factory=list)
    damaged: SavedCheckpoint | None = None

    @property
    def url(self) -> str:
        return str(self.root)

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.saved)

    @property
    def human_size(self) -> str:
        return short_bytes(self.size_bytes)  # as the Overview's metric shows it

    def of_run(self, run_id: str) -> list[SavedCheckpoint]:
        return [s for s in self.saved if s.run_id == run_id]


def demo_state(run_id: str, step: int) -> dict:
    messages = []
    for i in range(step + 1):
        messages += [{"role": "user", "content": f"{run_id}: please do task {i}"},
                     {"role": "assistant", "content": f"Task {i} done (called `search`)."}]
    return {"messages": messages, "tools": {"api_key": SECRET, "enabled": ["search", "shell"]},
            "plan": {"step": step, "goal": f"finish {run_id}"}, "__pregel_tasks": [step]}


def build_demo_store(root: Path, home: Path, steps: int = 6, damage: bool = True) -> DemoStore:
    """Write the demo store, index it into ``home``, then damage one checkpoint and re-index."""
    writer = NativeWriter(str(root))
    store = DemoStore(root, home)
    for n, (run_id, agent) in enumerate(RUNS.items()):
        for step in range(steps):
            event = ({"kind": "error", "message": f"tool `shell` failed: 401 for key {SECRET}"}
                     if run_id == "run-beta" and step == 3 else None)
            store.saved.append(writer.save(
                run_id, demo_state(run_id, step), agent=agent, step=step, event=event,
                trigger="final" if step == steps - 1 else ("event" if step == 2 else "periodic"),
                created_at=START + timedelta(minutes=40 * n + 5 * step)))
    catalog = open_catalog(load_settings(home))
    index_store(catalog, str(root))
    if damage:
        store.damaged = store.of_run("run-gamma")[-1]
        (root / store.damaged.location).unlink()
        index_store(catalog, str(root), full=True)
    return store


# ---- a real server --------------------------------------------------------------------


def page_env(monkeypatch: pytest.MonkeyPatch, home: Path, store_url: str) -> None:
    """The environment `lastgood ui` gives the pages (for AppTest): the home, the store, read-only."""
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", store_url)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"streamlit did not answer on {url} within {timeout} s")


def start_streamlit(store: DemoStore, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, LASTGOOD_HOME=str(store.home), LASTGOOD_STORES=store.url,
               PYTHONUNBUFFERED="1")
    env.pop("LASTGOOD_ALLOW_WRITE", None)
    # exactly what a user runs: index, then serve (the CLI must not keep the index locked)
    command = [str(Path(sys.executable).with_name("lastgood")), "ui", store.url, "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, f"http://127.0.0.1:{port}"


def group_pids(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (the group a ``start_new_session`` child leads)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    pids.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def browser_store(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("browser-store")
    return build_demo_store(base / "store", base / "home")


@pytest.fixture(scope="module")
def streamlit_server(browser_store: DemoStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of `lastgood ui` serving the demo store."""
    yield from serve_store(browser_store, tmp_path_factory.mktemp("streamlit-log") / "streamlit.log")


def serve_store(store: DemoStore, log: Path, timeout: float = 30.0) -> Iterator[str]:
    """`lastgood ui` on ``store`` until the generator is closed; fails with the server's log
    when it does not come up."""
    proc, url = start_streamlit(store, log)
    try:
        wait_for_health(url, proc, timeout=timeout)
    except (RuntimeError, TimeoutError) as exc:
        stop_group(proc)
        pytest.fail(f"{exc}\n--- lastgood ui log ---\n{log.read_text(errors='replace')[-4000:]}")
    try:
        yield url
    finally:
        stop_group(proc)


@pytest.fixture(scope="module")
def chromium_browser() -> Iterator[object]:
    """Debian's Chromium driven by Playwright; fails (never skips) when it is missing."""
    if not Path(CHROMIUM).exists():
        pytest.fail(CHROMIUM_HINT)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
