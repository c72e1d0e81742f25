"""Faults of the machine and the terminal: one line and exit 2, a surviving index, escaped output.

Through the real ``lastgood`` console script (tests/helpers.lastgood_cli) where the
process matters (resource limits, the dashboard's port), in-process otherwise.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lastgood.cli.main import main
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import SAMPLE_STORE, T0, lastgood_cli, write_store

ESC = "\x1b"


def one_line_error(done: subprocess.CompletedProcess[str] | tuple[int, str, str], code: int = 2) -> str:
    rc, err = (done.returncode, done.stderr) if isinstance(done, subprocess.CompletedProcess) else (done[0], done[2])
    assert rc == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lastgood: error: "), err
    assert "Traceback" not in err
    return lines[0]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_home_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    line = one_line_error(lastgood_cli("ls", str(SAMPLE_STORE), home=home))
    assert "not a folder" in line


def test_the_index_is_private(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "fresh" / "home"
    store = tmp_path / "store"
    write_store(str(store), runs=1, steps=2)
    assert run(capsys, "ls", str(store), "--home", str(home))[0] == 0
    assert home.stat().st_mode & 0o777 == 0o700
    assert (home / "index.duckdb").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("port", ["busy", "99999", "0"])
def test_ui_with_a_busy_or_invalid_port_is_one_line_before_any_work(port: str, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        chosen = str(busy.getsockname()[1]) if port == "busy" else port
        started = time.monotonic()
        done = lastgood_cli("ui", str(SAMPLE_STORE), "--port", chosen, home=tmp_path / "home")
    line = one_line_error(done)
    assert ("in use" in line) if port == "busy" else "not a TCP port" in line
    assert time.monotonic() - started < 30
    assert not (tmp_path / "home" / "index.duckdb").exists(), "the port is checked before indexing"


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_is_one_line_and_the_index_survives(tmp_path: Path) -> None:
    home = tmp_path / "home"
    small = tmp_path / "small"
    write_store(str(small), runs=1, steps=3)
    first = lastgood_cli("ls", str(small), "--format", "json", home=home)
    assert first.returncode == 0, first.stderr
    exe = Path(sys.executable).with_name("lastgood")
    env = dict(os.environ, LASTGOOD_HOME=str(home))
    full = subprocess.run([str(exe), "index", str(SAMPLE_STORE)], capture_output=True, text=True,
                          env=env, timeout=300, preexec_fn=_limit_file_size(16 * 1024))
    line = one_line_error(full)
    assert "disk" in line or "written" in line or "too large" in line.lower(), line
    again = lastgood_cli("ls", str(small), "--format", "json", home=home)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert lastgood_cli("ls", str(SAMPLE_STORE), home=home).returncode == 0


def test_index_during_concurrent_compactions_reads_a_consistent_snapshot(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(str(store), runs=2, steps=4)
    script = f"""
import time
from lastgood.readers.native.writer import NativeWriter
w = NativeWriter({str(store)!r})
end = time.monotonic() + 25
i = 0
while time.monotonic() < end:  # a compaction every ~0.3 s: far more often than in real use
    w.save("busy", {{"i": i}})
    i += 1
    time.sleep(0.02)
    if i % 10 == 0:
        w.compact()
"""
    writer = subprocess.Popen([sys.executable, "-c", script])
    try:
        results = []
        deadline = time.monotonic() + 20
        home = tmp_path / "home"
        while time.monotonic() < deadline and writer.poll() is None:
            results.append(lastgood_cli("index", str(store), "--check", "none", home=home))
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert len(results) >= 3
    for done in results:
        assert done.returncode == 0, done.stderr
        assert "error" not in done.stderr
    final = lastgood_cli("ls", str(store), "--format", "json", home=tmp_path / "home")
    rows = json.loads(final.stdout)
    assert len({(r["run_id"], r["checkpoint_id"]) for r in rows}) == len(rows)


def test_control_characters_never_reach_the_terminal(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    writer = NativeWriter(str(store))
    run_id = f"evil{ESC}[2J{ESC}]0;owned\x07\nFAKE ROW ok\r\u202eid\x9b31m"
    writer.save(run_id, {"msg": f"state {ESC}[31m red"}, agent=f"agent{ESC}[5m", created_at=T0,
                event={"kind": "error", "message": f"boom{ESC}[1A\nFAKE finding"})
    home = str(tmp_path / "home")
    for command in (["ls", str(store)], ["index", str(store)], ["verify", str(store)],
                    ["show", str(store), writer.head(run_id)["checkpoint_id"]]):
        code, out, err = run(capsys, *command, "--home", home)
        assert code in (0, 1), err
        for text in (out, err):
            assert ESC not in text and "\r" not in text and "\x9b" not in text and "\u202e" not in text
            assert "\x07" not in text
        assert "\\x1b[2J" in out or command[0] in ("index", "verify")
    code, out, _ = run(capsys, "ls", str(store), "--home", home)
    assert len(out.strip().splitlines()) == 3  # header, one row, the count: no fake rows
    code, out, _ = run(capsys, "ls", str(store), "--home", home, "--format", "json")
    assert json.loads(out)[0]["run_id"] == run_id  # JSON keeps the exact value, escaped
    assert "\x9b" not in out and "\u202e" not in out
    code, out, err = run(capsys, "show", str(store), f"nope{ESC}[31m\nfake", "--home", home)
    assert code == 2 and ESC not in err and len(err.strip().splitlines()) == 1


def test_exit_codes_per_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/cli.md: index/ls/show 0 even with error findings; verify 1 with errors; 2 for usage/I/O."""
    home = str(tmp_path / "home")
    sample = str(SAMPLE_STORE)
    assert run(capsys, "index", sample, "--home", home)[0] == 0
    assert run(capsys, "ls", sample, "--home", home)[0] == 0
    assert run(capsys, "verify", sample, "--home", home)[0] == 1
    assert run(capsys, "show", sample, "no-such-id", "--home", home)[0] == 2
    assert run(capsys, "ls", str(tmp_path / "missing"), "--home", home)[0] == 2
    healthy = tmp_path / "healthy"
    write_store(str(healthy), runs=1, steps=3)
    assert run(capsys, "verify", str(healthy), "--read-data", "--home", home)[0] == 0
