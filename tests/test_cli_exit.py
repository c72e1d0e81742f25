"""The ``lastgood`` console script ends without the interpreter's teardown once a command is
done (lastgood.cli.main.end_now): the index's changes are in its file, the output is complete, the
exit code is the command's — and it waits as usual while a thread or a child still works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from tests.helpers import lastgood_cli, write_store

END_NOW = textwrap.dedent("""
    import sys
    from lastgood.index.catalog import Catalog
    from lastgood.cli.main import end_now
    catalog = Catalog(sys.argv[1])  # keeps its connection open
    with catalog.connect() as con:
        con.execute("INSERT INTO stores (url) VALUES ('file:///written-before-the-end')")
    print("x" * 200_000, end="")  # more than a pipe's buffer: must all arrive
    end_now(3)
    print("never")
""")


def test_end_now_closes_the_index_flushes_the_output_and_keeps_the_code(tmp_path: Path) -> None:
    index = tmp_path / "index.duckdb"
    done = subprocess.run([sys.executable, "-c", END_NOW, str(index)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 200_000
    assert not Path(f"{index}.wal").exists()  # closed: its changes are in the file itself
    with duckdb.connect(str(index), read_only=True) as con:
        assert con.execute("SELECT url FROM stores").fetchall() == [("file:///written-before-the-end",)]


NORMAL_EXIT_WHILE = textwrap.dedent("""
    import multiprocessing, threading, time
    from lastgood.cli.main import nothing_left_running

    def states(start, stop):
        before = nothing_left_running()
        start()
        try:
            during = nothing_left_running()
        finally:
            stop()
        return [before, during, nothing_left_running()]

    if __name__ == "__main__":
        release = threading.Event()
        worker = threading.Thread(target=release.wait)
        print(states(worker.start, lambda: (release.set(), worker.join())))
        child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,))
        print(states(child.start, lambda: (child.terminate(), child.join())))
""")


def test_a_running_thread_or_child_means_the_normal_exit(tmp_path: Path) -> None:
    """Between starting a thread (or a child) and its end the command is not done; before and after
    it is. In a fresh interpreter, as the console script is (a test runner keeps threads of its own)."""
    script = tmp_path / "normal_exit.py"
    script.write_text(NORMAL_EXIT_WHILE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[True, False, True]", "[True, False, True]"], done.stdout


def test_the_console_script_leaves_a_complete_index_and_output(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(str(store), runs=2, steps=4)
    home = tmp_path / "home"
    done = lastgood_cli("index", str(store), "--format", "json", home=home, check_json=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["checkpoints_read"] == 8
    assert not (home / "index.duckdb.wal").exists()
    listed = lastgood_cli("ls", str(store), "--format", "json", home=home, check_json=True)
    assert len(json.loads(listed.stdout)) == 8
    missing = lastgood_cli("show", str(store), "no-such-checkpoint", home=home)
    assert missing.returncode == 2 and "no checkpoint matches" in missing.stderr
