"""Hostile and broken native stores: every damage is a finding or one line, never a crash.

Each case makes one change to a fresh real store (written by NativeWriter) and runs
``index``, ``ls``, ``show`` and ``verify --read-data`` through the CLI's ``main``:
exit 0/1/2, at most one line on stderr, no traceback, the damage reported where it
is, everything else still listed, and the store's bytes unchanged.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lastgood import limits
from lastgood.cli.main import main
from lastgood.readers.native import format as nf
from lastgood.readers.common.jsonpatch import PatchError, apply_patch_sized
from lastgood.readers.native.writer import NativeWriter
from lastgood.redact import TOO_DEEP, redact
from tests.helpers import T0, tree_digest, write_store

RUNS, STEPS = 2, 6
TOTAL = RUNS * STEPS


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    write_store(str(root), runs=RUNS, steps=STEPS)
    return root



def run(capsys: pytest.CaptureFixture[str], *args: str, home: Path) -> tuple[int, str, str]:
    code = main([*args, "--home", str(home)])
    out, err = capsys.readouterr()
    return code, out, err


def run_all(capsys: pytest.CaptureFixture[str], root: Path, home: Path,
            show: str | None = None) -> dict[str, tuple[int, str, str]]:
    """index, ls, show (first listed checkpoint, or ``show``), verify --read-data: all as JSON."""
    before = tree_digest(root)
    results = {"index": run(capsys, "index", str(root), "--format", "json", home=home),
               "ls": run(capsys, "ls", str(root), "--format", "json", home=home)}
    rows = json.loads(results["ls"][1]) if results["ls"][0] == 0 else []
    target = show or (rows[0]["checkpoint_id"] if rows else "nothing")
    results["show"] = run(capsys, "show", str(root), target, "--format", "json", home=home)
    results["verify"] = run(capsys, "verify", str(root), "--read-data", "--format", "json", home=home)
    for name, (code, _out, err) in results.items():
        assert code in (0, 1, 2), (name, code, err)
        assert "Traceback" not in err and "unexpected error" not in err, (name, err)
        assert len(err.strip().splitlines()) <= 1, (name, err)
    assert tree_digest(root) == before, "a command changed the store"
    return results


def findings(results: dict[str, tuple[int, str, str]]) -> list[dict]:
    code, out, _ = results["verify"]
    assert code in (0, 1)
    return json.loads(out)["findings"]


def listed(results: dict[str, tuple[int, str, str]]) -> list[dict]:
    return json.loads(results["ls"][1])


def blobs(root: Path) -> list[Path]:
    return sorted(p for p in (root / "blobs").rglob("*") if p.is_file() and not p.is_symlink())


def first_full_blob(root: Path) -> Path:
    """A full checkpoint's blob (its children are incremental: their chains break with it)."""
    for path in blobs(root):
        if not nf.is_patch(json.loads(path.read_bytes())):
            return path
    raise AssertionError("no full checkpoint")


def add_tail(root: Path, lines: list[str]) -> None:
    (root / nf.TAIL / "zz-hostile.jsonl").write_text("\n".join(lines) + "\n")


def entry(**fields: object) -> str:
    base = {"run_id": "extra", "checkpoint_id": "extra-1", "location": "blobs/extra/1.json",
            "codec": "json", "step": 1, "created_at": "2026-11-02T09:00:00Z"}
    base.update(fields)
    return json.dumps(base, allow_nan=True, ensure_ascii=False)


# ---- files that are not what they claim -------------------------------------------------

def test_symlink_blob_out_of_the_store_is_refused_not_read(store: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "outside.json"
    secret.write_text('{"stolen": "TOP-SECRET-OUTSIDE"}')
    blob = first_full_blob(store)
    blob.unlink()
    blob.symlink_to(secret)
    cid = blob.stem
    results = run_all(capsys, store, tmp_path / "home", show=cid)
    assert "TOP-SECRET-OUTSIDE" not in "".join(r[1] + r[2] for r in results.values())
    assert any(f["check"] == "unsafe-path" and f["checkpoint_id"] == cid for f in findings(results))
    assert results["verify"][0] == 1
    assert len(listed(results)) == TOTAL


def test_symlinked_store_folder_inside_the_root_still_reads(store: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "link-to-store"
    link.symlink_to(store)
    results = run_all(capsys, link, tmp_path / "home")
    assert results["verify"][0] == 0, findings(results)


def test_a_store_reached_through_a_link_and_by_its_path_is_one_store(store: Path, tmp_path: Path) -> None:
    from lastgood.index import queries
    from lastgood.index.catalog import Catalog
    from tests.helpers import lastgood_cli

    link = tmp_path / "link-to-store"
    link.symlink_to(store)
    home = tmp_path / "home"
    for path in (link, store, f"file://{link}"):
        done = lastgood_cli("index", str(path), home=home)
        assert done.returncode == 0, done.stderr
    assert list(queries.indexed_stores(Catalog(home / "index.duckdb"))) == [str(store.resolve())]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder"])
def test_special_files_as_blobs_are_refused_without_opening(kind: str, store: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    blob = first_full_blob(store)
    blob.unlink()
    if kind == "fifo":
        os.mkfifo(blob)
    elif kind == "dev-zero":
        blob.symlink_to("/dev/zero")
    else:
        blob.mkdir()
    started = time.monotonic()
    results = run_all(capsys, store, tmp_path / "home", show=blob.stem)
    assert time.monotonic() - started < 60
    mine = [f for f in findings(results) if f["checkpoint_id"] == blob.stem]
    assert mine and mine[0]["check"] in ("not-a-file", "unsafe-path"), mine
    assert json.loads(results["show"][1])["state"] is None


def test_a_blob_larger_than_recorded_is_read_only_up_to_its_size_plus_a_margin(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blob = first_full_blob(store)
    with open(blob, "ab") as handle:
        handle.write(b" " * (limits.BLOB_MARGIN_BYTES + 10))
    results = run_all(capsys, store, tmp_path / "home", show=blob.stem)
    assert json.loads(results["show"][1])["state"] is None
    assert any(f["checkpoint_id"] == blob.stem and f["check"] == "size-mismatch" for f in findings(results))


def test_catalog_files_that_are_links_or_fifos_are_refused(store: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(entry(run_id="from-outside") + "\n")
    (store / nf.TAIL / "zz-link.jsonl").symlink_to(outside)
    os.mkfifo(store / nf.TAIL / "zz-fifo.jsonl")
    os.mkfifo(store / nf.HEADS / "zz-fifo.json")
    results = run_all(capsys, store, tmp_path / "home")
    assert not any(r["run_id"] == "from-outside" for r in listed(results))
    refused = [f for f in json.loads(results["index"][1])["findings"] if f["check"] == "not-a-file"]
    assert len(refused) == 3, refused


# ---- one malformed item never hides the rest -----------------------------------------------

BAD_LINES = {
    "run_id-int": entry(run_id=123),
    "step-infinity": entry(step=float("inf")),
    "step-float": entry(step=1.5),
    "step-huge": entry(step=2**70),
    "created-1e20": entry(created_at=1e20),
    "created-garbage": entry(created_at="yesterday"),
    "created-year-0": entry(created_at="0000-01-01"),
    "lone-surrogate": entry(run_id="run-\ud800"),
    "nul-in-id": entry(checkpoint_id="a\x00b"),
    "kind-unknown": entry(kind="sideways"),
    "size-negative": entry(size_bytes=-5),
    "codec-list": entry(codec=["json"]),
    "not-an-object": "[1, 2, 3]",
    "deep-line": "[" * 100_000 + "]" * 100_000,
    "truncated": entry()[:40],
    "bad-utf8": "{\"run_id\": \"\xff\"}",
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_a_malformed_catalog_line_is_a_finding_naming_file_and_line(
        case: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = BAD_LINES[case]
    path = store / nf.TAIL / "zz-hostile.jsonl"
    data = line.encode("utf-8", "surrogatepass") if case != "bad-utf8" else b'{"run_id": "\xff"}'
    path.write_bytes(data + b"\n")
    results = run_all(capsys, store, tmp_path / "home")
    assert len(listed(results)) == TOTAL
    catalog = [f for f in json.loads(results["index"][1])["findings"] if f["check"] == "catalog-line"]
    assert catalog and "zz-hostile.jsonl:1" in catalog[0]["message"], catalog


def test_bad_metadata_keeps_the_checkpoint_and_reports_it(store: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    blob = first_full_blob(store)
    location = str(blob.relative_to(store))
    add_tail(store, [entry(run_id="meta-run", checkpoint_id="meta-1", location=location,
                           size_bytes=blob.stat().st_size, metadata="oops")])
    results = run_all(capsys, store, tmp_path / "home", show="meta-1")
    assert any(r["checkpoint_id"] == "meta-1" for r in listed(results))
    shown = json.loads(results["show"][1])
    assert shown["checkpoint"]["metadata"] == {}
    assert any(f["check"] == "metadata-invalid" for f in shown["findings"])


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong-columns", "bad-rows"])
def test_a_broken_parquet_part_is_a_finding_and_the_rest_loads(
        damage: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    NativeWriter(str(store)).compact()
    part = next((store / nf.PARTS).glob("*.parquet"))
    good_rows = pq.read_table(part).num_rows
    extra = store / nf.PARTS / "zz-hostile.parquet"
    if damage == "garbage":
        extra.write_bytes(os.urandom(3000))
    elif damage == "truncated":
        extra.write_bytes(part.read_bytes()[:-200])
    elif damage == "wrong-columns":
        pq.write_table(pa.table({"x": [1, 2]}), extra)
    else:
        rows = pq.read_table(part).to_pylist()[:3]
        rows[0]["run_id"] = None
        rows[1]["metadata"] = "not json"
        rows[2]["checkpoint_id"] = "renamed-" + rows[2]["checkpoint_id"]
        pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(part)), extra)
    results = run_all(capsys, store, tmp_path / "home")
    ids = {r["checkpoint_id"] for r in listed(results)}
    assert len(ids) >= good_rows
    index_findings = json.loads(results["index"][1])["findings"]
    assert any("zz-hostile.parquet" in f["message"] for f in index_findings), index_findings
    if damage == "bad-rows":
        assert any(i.startswith("renamed-") for i in ids)


def test_a_pending_marker_with_a_bad_time_and_a_head_with_a_list_run_id(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (store / nf.PENDING / "bad.json").write_text(json.dumps({"run_id": "r", "checkpoint_id": "c",
                                                             "started_at": "not a time"}))
    (store / nf.PENDING / "bad2.json").write_text(json.dumps({"run_id": "r", "checkpoint_id": "c2",
                                                              "started_at": 1e300}))
    (store / nf.HEADS / "bad.json").write_text(json.dumps({"run_id": ["a"], "checkpoint_id": "c"}))
    (store / nf.HEADS / "bad2.json").write_text("[]")
    results = run_all(capsys, store, tmp_path / "home")
    messages = " ".join(f["message"] for f in json.loads(results["index"][1])["findings"])
    for name in ("pending/bad.json", "pending/bad2.json", "heads/bad.json", "heads/bad2.json"):
        assert name in messages
    assert len(listed(results)) == TOTAL


@pytest.mark.parametrize("marker", [{"format": "lastgood-native", "version": 2},
                                    {"format": "lastgood-native", "version": "1"},
                                    {"format": "something-else", "version": 1}, "garbage"])
def test_an_unknown_store_format_version_is_refused_with_a_clear_message(
        marker: object, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (store / nf.MARKER).write_text(json.dumps(marker) if marker != "garbage" else "{nope")
    code, _out, err = run(capsys, "ls", str(store), home=tmp_path / "home")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("version" in err and "upgrade" in err) or "not a lastgood-native store" in err \
        or "marker unreadable" in err, err


# ---- valid but extreme data, and data built to hurt ------------------------------------------------

def nested(depth: int) -> object:
    value: object = "bottom"
    for _ in range(depth):
        value = {"d": value}
    return value


def test_a_state_nested_10000_deep_is_a_too_deep_finding(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    writer = NativeWriter(str(root))
    writer.save("shallow", {"ok": 1}, created_at=T0)
    blob = root / nf.blob_location("deep", "deep-1", "json")
    blob.parent.mkdir(parents=True)
    data = ('{"d":' * 10_000 + '1' + '}' * 10_000).encode()
    blob.write_bytes(data)
    add_tail(root, [entry(run_id="deep", checkpoint_id="deep-1", location=str(blob.relative_to(root)),
                          size_bytes=len(data), checksum=nf.sha256_text(data))])
    results = run_all(capsys, root, tmp_path / "home", show="deep-1")
    assert any(f["check"] == "too-deep" and f["checkpoint_id"] == "deep-1" for f in findings(results))


def test_redaction_of_a_very_deep_value_is_capped_not_a_recursion_error() -> None:
    shown = redact(nested(10_000))
    depth = 0
    while isinstance(shown, dict):
        shown, depth = shown["d"], depth + 1
    assert shown == TOO_DEEP and depth == limits.MAX_DEPTH


def test_sixty_doubling_copy_ops_stop_at_the_budget_quickly() -> None:
    ops = [{"op": "add", "path": "/a", "value": [1, 2, 3, 4]}]
    ops += [{"op": "copy", "from": "/a", "path": f"/a/{0}"} for _ in range(60)]
    started = time.process_time()  # CPU of this process: a loaded machine does not fail it
    with pytest.raises(PatchError) as caught:
        apply_patch_sized({}, ops)
    assert caught.value.too_large
    assert time.process_time() - started < 10


def test_a_patch_bomb_in_a_store_is_a_too_large_finding(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    writer = NativeWriter(str(root), full_every=100)
    saved = writer.save("bomb", {"a": ["x" * 10] * 8}, created_at=T0)
    ops = [{"op": "copy", "from": "/a", "path": "/a/0"} for _ in range(60)]
    envelope = nf.patch_envelope({"checkpoint_id": saved.checkpoint_id, "location": saved.location,
                                  "codec": "json", "checksum": saved.checksum, "kind": "full"}, ops)
    data = nf.encode_payload(envelope, "json")
    location = nf.blob_location("bomb", "bomb-2", "json")
    (root / location).write_bytes(data)
    add_tail(root, [entry(run_id="bomb", checkpoint_id="bomb-2", parent_id=saved.checkpoint_id,
                          kind="incremental", location=location, size_bytes=len(data),
                          checksum=nf.sha256_text(data))])
    started = time.monotonic()
    results = run_all(capsys, root, tmp_path / "home", show="bomb-2")
    assert time.monotonic() - started < 60
    assert any(f["check"] == "too-large" and f["checkpoint_id"] == "bomb-2" for f in findings(results))


def test_a_cycle_of_incremental_envelopes_is_a_finding(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "store"
    NativeWriter(str(root)).save("ok", {"v": 1}, created_at=T0)
    loc_a, loc_b = nf.blob_location("loop", "a", "json"), nf.blob_location("loop", "b", "json")
    (root / loc_a).parent.mkdir(parents=True)
    # a's parent is b and b's parent is a (no checksums: the refs cannot know each other's)
    for here, there, cid in ((loc_a, loc_b, "b"), (loc_b, loc_a, "a")):
        ref = {"checkpoint_id": cid, "location": there, "codec": "json", "kind": "incremental"}
        (root / here).write_bytes(nf.encode_payload(nf.patch_envelope(ref, []), "json"))
    add_tail(root, [entry(run_id="loop", checkpoint_id="a", parent_id="b", kind="incremental",
                          location=loc_a),
                    entry(run_id="loop", checkpoint_id="b", parent_id="a", kind="incremental",
                          location=loc_b)])
    results = run_all(capsys, root, tmp_path / "home", show="a")
    checks = {f["check"] for f in findings(results) if f["run_id"] == "loop"}
    assert "parent-cycle" in checks, checks


def test_a_long_incremental_chain_loads_and_verifies(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """2,000 links (the old recursive reader died at ~330); 50,000 in benchmarks/bench_soak.py."""
    from lastgood.readers.native.writer import SaveRequest

    root = tmp_path / "chain"
    writer = NativeWriter(str(root), full_every=10**9)
    n = 2_000
    writer.save_many(SaveRequest("long", {"turn": i, "note": f"step {i}"}) for i in range(n))
    assert writer.load_head_state("long") == {"turn": n - 1, "note": f"step {n - 1}"}
    home = tmp_path / "home"
    code, out, err = run(capsys, "verify", str(root), "--read-data", "--format", "json", home=home)
    assert code == 0, err
    assert json.loads(out)["checked"] == n
    tip = writer.head("long")["checkpoint_id"]
    code, out, _ = run(capsys, "show", str(root), tip, "--format", "json", home=home)
    assert code == 0 and json.loads(out)["state"]["turn"] == n - 1


def test_msgpack_maps_with_unhashable_keys_decode_as_data() -> None:
    import msgpack

    from lastgood.readers.langgraph.serde import decode_msgpack

    data = msgpack.packb({(1, 2): "tuple", b"raw": "bytes"}, use_bin_type=True)
    assert nf.decode_payload(data, "msgpack") == {"[1, 2]": "tuple", "raw": "bytes"}
    assert decode_msgpack(data) == {"[1, 2]": "tuple", "raw": "bytes"}


# ---- duplicates ----------------------------------------------------------------------------

def test_the_same_checkpoint_in_several_catalog_files_is_one_row(store: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    first = sorted((store / nf.TAIL).glob("*.jsonl"))[0].read_bytes()
    (store / nf.TAIL / "zz-copy.jsonl").write_bytes(first)
    NativeWriter(str(store)).compact()
    (store / nf.TAIL / "zz-copy-again.jsonl").write_bytes(first)
    part = next((store / nf.PARTS).glob("*.parquet"))
    (store / nf.PARTS / "zz-part-copy.parquet").write_bytes(part.read_bytes())  # a compaction crash
    results = run_all(capsys, store, tmp_path / "home")
    rows = listed(results)
    assert len(rows) == TOTAL
    assert len({(r["run_id"], r["checkpoint_id"]) for r in rows}) == TOTAL


def test_the_same_checkpoint_id_in_two_runs_is_reported_and_addressable_as_run_slash_id(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = json.loads((sorted((store / nf.TAIL).glob("*.jsonl"))[0]).read_text().splitlines()[0])
    cid = line["checkpoint_id"]
    line["run_id"] = "copied-run"
    add_tail(store, [json.dumps(line)])
    home = tmp_path / "home"
    results = run_all(capsys, store, home, show=f"copied-run/{cid}")
    assert json.loads(results["show"][1])["checkpoint"]["run_id"] == "copied-run"
    dupes = [f for f in findings(results) if f["check"] == "duplicate-id"]
    assert {f["run_id"] for f in dupes} == {"copied-run", "run-0"}
    code, _out, err = run(capsys, "show", str(store), cid, home=home)
    assert code == 2 and "RUN/ID" in err and "copied-run/" in err


def test_compact_works_on_a_copy_of_the_sample_store(tmp_path: Path) -> None:
    import shutil

    from tests.helpers import SAMPLE_STORE

    copy = tmp_path / "agents"
    shutil.copytree(SAMPLE_STORE, copy)
    report = NativeWriter(str(copy)).compact()
    assert report.rejected == 1 and (copy / nf.REJECTED).is_dir()
    assert not list((copy / nf.TAIL).glob("*.jsonl"))


