"""A structure-aware fuzzer: random valid and invalid stores through the real CLI.

Hypothesis builds native stores (catalog lines with wrong types, ranges and
encodings, broken Parquet parts, heads, pending markers, store markers, blobs that
are truncated, deep, patch bombs, symlinks out, /dev/zero, FIFOs, folders) and
LangGraph SQLite files (rows with NULLs, wrong types, control characters, random
bytes, damaged pages). Each example runs ``index``, ``ls``, ``show`` and
``verify --read-data``: exit 0/1/2, at most one line on stderr, no traceback,
valid JSON, bounded time, and the store's bytes unchanged. Most examples call the
CLI's ``main`` in-process (fast); a sample runs the real ``lastgood`` console
script under a memory cap (RLIMIT_AS) and a timeout. ``LASTGOOD_FUZZ_SCALE``
multiplies the example counts (120 native, 30 LangGraph, 4 real-CLI by default, sized to keep the
suite within its time budget; benchmarks/bench_soak.py runs many more).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lastgood.cli.main import main
from lastgood.readers.native import format as nf
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import ROOT, T0, agent_state, tree_digest

SCALE = float(os.environ.get("LASTGOOD_FUZZ_SCALE", "1"))
MEMORY_CAP = 3 * 2**30  # bytes of address space for the real CLI
COMMAND_SECONDS = 90
LANGGRAPH_SAMPLE = ROOT / "sample_data" / "langgraph.sqlite"
FUZZ = settings(deadline=None, derandomize="LASTGOOD_FUZZ_RANDOM" not in os.environ, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


# ---- values that hurt -------------------------------------------------------------------

HOSTILE_TEXT = ["", " ", "\x1b[31mred\x1b[0m", "line\nbreak", "\r\x07\x9b2J", "\u202eevil", "a\x00b",
                "\ud800", "../../../../etc/passwd", "/dev/zero", "blobs/../../x", "%2e%2e/x",
                "sk-live-0123456789abcdefSECRET", "https://user:pw@host/x", "x" * 5000,
                "[link](https://evil.example)", "<script>alert(1)</script>", "😀" * 10, "NaN"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(HOSTILE_TEXT),
    st.text(max_size=30), st.sampled_from([1e20, -1e20, 1e300, 2**63, -(2**63) - 1, 0, -1]),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)
ENTRY_FIELDS = ("run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger",
                "kind", "size_bytes", "checksum", "agent", "codec", "location", "metadata")


@st.composite
def catalog_line(draw: st.DrawFn, base: list[dict[str, Any]]) -> bytes:
    """A catalog line: often a real entry with a few fields replaced, sometimes raw junk."""
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "random", "junk"]))
    if kind == "junk":
        return draw(st.one_of(st.binary(max_size=80), st.sampled_from(
            [b"{", b"[]", b"null", b'"str"', b"{" * 3000, b"[" * 5000 + b"]" * 5000, b'{"a":1}'])))
    row: dict[str, Any] = dict(draw(st.sampled_from(base))) if kind == "mutated" else {}
    for field in draw(st.lists(st.sampled_from(ENTRY_FIELDS), max_size=4 if kind == "mutated" else 10)):
        row[field] = draw(values)
    if draw(st.booleans()) and kind == "mutated":
        row["checkpoint_id"] = draw(st.sampled_from(HOSTILE_TEXT[1:]) | st.text(min_size=1, max_size=12))
    text = json.dumps(row, allow_nan=True, ensure_ascii=draw(st.booleans()), default=str)
    return text.encode("utf-8", "surrogatepass")


BLOB_DAMAGE = ["truncate", "garbage", "empty", "grow", "symlink-out", "dev-zero", "dangling", "fifo",
               "folder", "deep", "patch-bomb", "random-patch", "self-parent"]
PART_DAMAGE = ["garbage", "truncated", "wrong-columns", "copy", "bad-rows"]


@st.composite
def native_mutations(draw: st.DrawFn, base: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    mutations: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["tail", "tail", "blob", "blob", "part", "head", "pending",
                                     "marker", "catalog-link"]))
        if what == "tail":
            mutations.append(("tail", draw(st.lists(catalog_line(base), min_size=1, max_size=6))))
        elif what == "blob":
            mutations.append(("blob", draw(st.integers(0, len(base) - 1)), draw(st.sampled_from(BLOB_DAMAGE)),
                              draw(st.lists(st.dictionaries(st.sampled_from(["op", "path", "from", "value"]),
                                                            values, max_size=4), max_size=5))))
        elif what == "part":
            mutations.append(("part", draw(st.sampled_from(PART_DAMAGE))))
        elif what in ("head", "pending"):
            obj = draw(st.dictionaries(st.sampled_from(["run_id", "checkpoint_id", "namespace", "step",
                                                        "started_at", "kind", "location", "codec"]),
                                       values, max_size=6) | values)
            mutations.append((what, obj))
        elif what == "marker":
            mutations.append(("marker", draw(st.one_of(
                st.fixed_dictionaries({"format": st.just("lastgood-native"), "version": values}),
                values))))
        else:
            mutations.append(("catalog-link", draw(st.sampled_from(["out", "fifo", "dev-zero"]))))
    return mutations


# ---- building stores -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def native_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("fuzz") / "template"
    writer = NativeWriter(str(root), full_every=3)
    from datetime import timedelta

    for run in range(2):
        for step in range(4):
            writer.save(f"run-{run}", agent_state(step), agent=f"agent-{run}",
                        created_at=T0 + timedelta(minutes=step), metadata={"n": step})
    base = [json.loads(line) for p in sorted((root / nf.TAIL).glob("*.jsonl"))
            for line in p.read_text().splitlines()]
    (root.parent / "outside.json").write_text('{"secret": "OUTSIDE-THE-STORE"}')
    return root, base


def apply_native(root: Path, base: list[dict[str, Any]], mutation: tuple[Any, ...]) -> None:
    kind = mutation[0]
    if kind == "tail":
        name = f"zz-fuzz-{len(list((root / nf.TAIL).glob('*')))}.jsonl"
        (root / nf.TAIL / name).write_bytes(b"\n".join(mutation[1]) + b"\n")
    elif kind == "blob":
        damage_blob(root, base[mutation[1]], mutation[2], mutation[3])
    elif kind == "part":
        damage_part(root, mutation[1])
    elif kind in ("head", "pending"):
        folder = root / (nf.HEADS if kind == "head" else nf.PENDING)
        folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps(mutation[1], allow_nan=True, default=str).encode("utf-8", "surrogatepass")
        (folder / f"zz-fuzz-{len(list(folder.glob('*')))}.json").write_bytes(data)
    elif kind == "marker":
        data = json.dumps(mutation[1], allow_nan=True, default=str).encode("utf-8", "surrogatepass")
        (root / nf.MARKER).write_bytes(data)
    else:
        target = root / nf.TAIL / f"zz-link-{len(list((root / nf.TAIL).glob('*')))}.jsonl"
        if mutation[1] == "fifo":
            os.mkfifo(target)
        else:
            target.symlink_to(root.parent / "outside.json" if mutation[1] == "out" else "/dev/zero")


def damage_blob(root: Path, entry: dict[str, Any], damage: str, ops: list[Any]) -> None:
    path = root / entry["location"]
    if not path.is_file() or path.is_symlink():
        return
    data = path.read_bytes()
    if damage in ("symlink-out", "dev-zero", "dangling", "fifo", "folder"):
        path.unlink()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "grow":
        path.write_bytes(data + b" " * 100_000)
    elif damage == "symlink-out":
        path.symlink_to(root.parent / "outside.json")
    elif damage == "dev-zero":
        path.symlink_to("/dev/zero")
    elif damage == "dangling":
        path.symlink_to(root / "nowhere")
    elif damage == "fifo":
        os.mkfifo(path)
    elif damage == "folder":
        path.mkdir()
    elif damage == "deep":
        path.write_bytes(b'{"d":' * 20_000 + b"1" + b"}" * 20_000)
    else:
        ref = {"checkpoint_id": entry["checkpoint_id"], "location": entry["location"], "codec": "json",
               "kind": "incremental" if damage == "self-parent" else "full"}
        if damage == "patch-bomb":
            ops = [{"op": "add", "path": "/b", "value": [1, 2]}] + [
                {"op": "copy", "from": "/b", "path": "/b/0"}] * 60
        envelope = nf.patch_envelope(ref, ops if damage != "self-parent" else [])
        path.write_bytes(json.dumps(envelope, allow_nan=True, default=str).encode("utf-8", "surrogatepass"))


def damage_part(root: Path, damage: str) -> None:
    parts = root / nf.PARTS
    parts.mkdir(parents=True, exist_ok=True)
    target = parts / f"zz-fuzz-{len(list(parts.glob('*')))}.parquet"
    if damage == "garbage":
        target.write_bytes(os.urandom(2000))
        return
    rows = [json.loads(line) for p in sorted((root / nf.TAIL).glob("0*.jsonl"))
            for line in p.read_text().splitlines()]
    table = nf.entries_table([nf.parse_entry(json.dumps(r).encode()) for r in rows])
    if damage == "wrong-columns":
        table = pa.table({"run_id": [1, 2], "other": ["a", "b"]})
    elif damage == "bad-rows":
        data = table.to_pylist()
        data[0]["run_id"] = None
        data[-1]["metadata"] = "][ not json"
        data[len(data) // 2]["kind"] = "\x1b[31m"
        table = pa.Table.from_pylist(data, schema=table.schema)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    payload = sink.getvalue().to_pybytes()
    target.write_bytes(payload[: len(payload) // 2] if damage == "truncated" else payload)


LANGGRAPH_COLUMNS = {"checkpoints": ["thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id",
                                     "type", "checkpoint", "metadata"],
                     "writes": ["thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx",
                                "channel", "type", "value"]}
sql_values = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
                       st.sampled_from([h for h in HOSTILE_TEXT if "\ud800" not in h]),
                       st.binary(max_size=64), st.sampled_from([b"\x93\xa1x", b"\xc1", b"{}", b"[]",
                                                                b'{"step": "x"}', b"null", b"\xff\xfe"]))


@st.composite
def langgraph_mutations(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    mutations: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 5))):
        table = draw(st.sampled_from(list(LANGGRAPH_COLUMNS)))
        what = draw(st.sampled_from(["update", "update", "update", "insert", "delete", "bytes"]))
        if what == "bytes":
            mutations.append(("bytes", draw(st.integers(100, 2_400_000)), draw(st.binary(min_size=1, max_size=64))))
            continue
        column = draw(st.sampled_from(LANGGRAPH_COLUMNS[table]))
        mutations.append((what, table, column, draw(st.integers(1, 400)), draw(sql_values),
                          draw(st.lists(sql_values, min_size=len(LANGGRAPH_COLUMNS[table]),
                                        max_size=len(LANGGRAPH_COLUMNS[table])))))
    return mutations


def apply_langgraph(path: Path, mutations: list[tuple[Any, ...]]) -> None:
    con = sqlite3.connect(path)
    try:
        for mutation in mutations:
            if mutation[0] == "bytes":
                continue
            what, table, column, rowid, value, row = mutation
            try:
                if what == "update":
                    con.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, rowid))
                elif what == "insert":
                    cols = LANGGRAPH_COLUMNS[table]
                    con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                row)
                else:
                    con.execute(f"DELETE FROM {table} WHERE rowid = ?", (rowid,))
            except sqlite3.Error:
                continue
        con.commit()
    finally:
        con.close()
    for mutation in mutations:  # damaged pages last, on the closed file
        if mutation[0] == "bytes":
            with open(path, "r+b") as handle:
                handle.seek(min(mutation[1], max(path.stat().st_size - 1, 0)))
                handle.write(mutation[2])


# ---- running the CLI --------------------------------------------------------------------------


class Hung(BaseException):
    """A command ran past COMMAND_SECONDS (BaseException: the CLI cannot swallow it)."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(*_: object) -> None:
        raise Hung(f"command ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with time_limit(COMMAND_SECONDS):
        code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def run_subprocess(args: list[str], home: Path) -> tuple[int, str, str]:
    exe = Path(sys.executable).with_name("lastgood")
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=COMMAND_SECONDS * 2,
                          env=dict(os.environ, LASTGOOD_HOME=str(home)), preexec_fn=_cap_memory)
    return done.returncode, done.stdout, done.stderr


def check_commands(store: Path, home: Path, runner: Any) -> None:
    """index, ls, show, verify --read-data as JSON: the contract every example must keep."""
    before = tree_digest(store)
    started = time.monotonic()
    results = {}
    for name, args in (("index", ["index", str(store)]), ("ls", ["ls", str(store)])):
        results[name] = runner([*args, "--format", "json", "--home", str(home)])
    rows = json.loads(results["ls"][1]) if results["ls"][0] == 0 else []
    target = f"{rows[-1]['run_id']}/{rows[-1]['checkpoint_id']}" if rows else "missing"
    results["show"] = runner(["show", str(store), target, "--format", "json", "--home", str(home)])
    results["verify"] = runner(["verify", str(store), "--read-data", "--format", "json", "--home", str(home)])
    for name, (code, out, err) in results.items():
        context = f"{name} exited {code}: {err[-2000:]}"
        assert code in (0, 1, 2), context
        assert "Traceback" not in err and "unexpected error" not in err, context
        assert len(err.strip().splitlines()) <= 1, context
        if code in (0, 1):
            json.loads(out)
        assert "OUTSIDE-THE-STORE" not in out + err, context
    assert time.monotonic() - started < 4 * COMMAND_SECONDS
    assert tree_digest(store) == before, "a command changed the store"


@contextmanager
def workspace() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="lastgood-fuzz-"))
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):  # FIFOs and folders made read-only never block cleanup
            if path.is_dir() and not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)


def native_copy(template: Path, folder: Path) -> Path:
    store = folder / "store"
    shutil.copytree(template, store, symlinks=True)
    (folder / "outside.json").write_text('{"secret": "OUTSIDE-THE-STORE"}')
    return store


# ---- the tests ---------------------------------------------------------------------------------

def test_fuzz_native_stores_in_process(native_template: tuple[Path, list[dict[str, Any]]],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    template, base = native_template

    @settings(FUZZ, max_examples=examples(50))  # LASTGOOD_FUZZ_SCALE=10 for a soak
    @given(native_mutations(base))
    def one(mutations: list[tuple[Any, ...]]) -> None:
        with workspace() as folder:
            store = native_copy(template, folder)
            for mutation in mutations:
                apply_native(store, base, mutation)
            check_commands(store, folder / "home", lambda args: run_in_process(args, capsys))

    one()


def test_fuzz_langgraph_sqlite_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    @settings(FUZZ, max_examples=examples(15))
    @given(langgraph_mutations())
    def one(mutations: list[tuple[Any, ...]]) -> None:
        with workspace() as folder:
            db = folder / "graph.sqlite"
            shutil.copy(LANGGRAPH_SAMPLE, db)
            apply_langgraph(db, mutations)
            check_commands(db, folder / "home", lambda args: run_in_process(args, capsys))

    one()


def test_fuzz_through_the_real_cli_under_a_memory_cap(native_template: tuple[Path, list[dict[str, Any]]]) -> None:
    template, base = native_template

    @settings(FUZZ, max_examples=examples(4))
    @given(native_mutations(base), langgraph_mutations())
    def one(native: list[tuple[Any, ...]], langgraph: list[tuple[Any, ...]]) -> None:
        with workspace() as folder:
            store = native_copy(template, folder)
            for mutation in native:
                apply_native(store, base, mutation)
            check_commands(store, folder / "home", lambda args: run_subprocess(args, folder / "home"))
            db = folder / "graph.sqlite"
            shutil.copy(LANGGRAPH_SAMPLE, db)
            apply_langgraph(db, langgraph)
            check_commands(db, folder / "home", lambda args: run_subprocess(args, folder / "home"))

    one()


def test_the_fuzzer_reaches_the_damage_it_claims(native_template: tuple[Path, list[dict[str, Any]]],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Every blob damage and part damage, once each, is reported (not silently loaded)."""
    template, base = native_template
    for damage in ("symlink-out", "dev-zero", "fifo", "deep", "patch-bomb"):
        with workspace() as folder:
            store = native_copy(template, folder)
            entry = next(e for e in base if e["kind"] == "full" and e["run_id"] == "run-1")
            apply_native(store, base, ("blob", base.index(entry), damage, []))
            home = folder / "home"
            code, out, _ = run_in_process(["verify", str(store), "--read-data", "--format", "json",
                                           "--home", str(home)], capsys)
            assert code == 1
            assert any(f["checkpoint_id"] == entry["checkpoint_id"] for f in json.loads(out)["findings"])
