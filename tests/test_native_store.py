"""The native store: writer and reader round trips, catalog compaction, bad input."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.errors import DecodeError, ReaderError, StoreNotFound, UnsafePath
from lastgood.readers import native_format as nf
from lastgood.readers.base import as_table, record_from_row
from lastgood.readers.fsutil import safe_join
from lastgood.readers.jsonpatch import PatchError, apply_patch, make_patch
from lastgood.readers.native import NativeReader
from lastgood.readers.native_writer import NativeWriter
from tests.helpers import write_store


def scan_records(reader: NativeReader, since: str | None = None):
    scan = reader.scan(since)
    rows = [row for table in scan.checkpoints for row in as_table(table).to_pylist()]
    return scan, [record_from_row(r) for r in rows]


@pytest.fixture(params=["local", "memory"])
def store_url(request, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "store")
    return f"memory://lastgood-test-{uuid.uuid4().hex}"


@pytest.mark.parametrize("codec", ["json", "msgpack"])
def test_round_trip_rebuilds_every_state(store_url: str, codec: str) -> None:
    states = write_store(store_url, runs=2, steps=9, codec=codec)
    reader = NativeReader(store_url)
    _, records = scan_records(reader)
    assert len(records) == 18
    kinds = {r.kind for r in records}
    assert kinds == {"full", "incremental"}
    for record in records:
        assert reader.load_state(record) == states[record.run_id][record.step]
        assert record.checksum == nf.sha256_text(reader.read_blob(record))


def test_listing_carries_lineage_triggers_and_events(store_url: str) -> None:
    write_store(store_url, runs=1, steps=6)
    scan, records = scan_records(NativeReader(store_url))
    by_step = {r.step: r for r in records}
    assert by_step[0].parent_id is None
    assert all(by_step[s].parent_id == by_step[s - 1].checkpoint_id for s in range(1, 6))
    assert by_step[5].trigger == "final"
    events = [row for t in scan.events for row in t.to_pylist()]
    assert [(e["kind"], e["checkpoint_id"]) for e in events] == [("timeout", by_step[5].checkpoint_id)]
    assert [h.checkpoint_id for h in scan.heads] == [by_step[5].checkpoint_id]


def test_compaction_keeps_every_entry_and_a_refresh_sees_no_duplicates(store_url: str) -> None:
    states = write_store(store_url, runs=2, steps=5)
    reader = NativeReader(store_url)
    first, before = scan_records(reader)
    report = NativeWriter(store_url).compact()
    assert report.entries == 10 and report.tail_removed == 10  # one commit marker per save
    again, after = scan_records(reader, first.token)
    assert not again.full
    assert sorted(r.checkpoint_id for r in after) == sorted(r.checkpoint_id for r in before)
    for record in after:
        assert reader.load_state(record) == states[record.run_id][record.step]
    unchanged, rows = scan_records(reader, again.token)
    assert rows == [] and unchanged.token == again.token


def test_head_state_resumes_a_run(store_url: str) -> None:
    states = write_store(store_url, runs=1, steps=7)
    writer = NativeWriter(store_url)
    assert writer.load_head_state("run-0") == states["run-0"][-1]
    saved = writer.save("run-0", {"resumed": True})
    assert saved.step == 7 and saved.kind == "full"
    assert writer.load_head_state("run-0") == {"resumed": True}
    assert writer.load_head_state("never-ran") is None


def test_malformed_catalog_line_is_a_finding_and_the_rest_loads(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=4)
    tail = tmp_path / "s" / nf.TAIL
    good = json.loads((tail / sorted(p.name for p in tail.iterdir())[0]).read_text())
    (tail / "bad.jsonl").write_text('{"run_id": "x", "checkpoint_id": \n' + json.dumps(good | {"checkpoint_id": "copy-1"}) + "\n")
    scan, records = scan_records(NativeReader(url))
    assert len(records) == 5
    assert [f.check for f in scan.findings] == ["catalog-line"]
    assert scan.findings[0].message.startswith("catalog/tail/bad.jsonl:1: malformed catalog line")


def test_damaged_blobs_become_decode_errors_with_reasons(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=3)
    reader = NativeReader(url)
    _, records = scan_records(reader)
    full = next(r for r in records if r.step == 0)
    blob = tmp_path / "s" / full.location
    blob.write_bytes(blob.read_bytes()[:-5])
    with pytest.raises(DecodeError, match="sha256 mismatch"):
        NativeReader(url).load_state(full)
    child = next(r for r in records if r.step == 1)
    with pytest.raises(DecodeError, match="incremental chain broken"):
        NativeReader(url).load_state(child)
    findings = list(NativeReader(url).check_checkpoints(records, read_data=False))
    assert [(f.check, f.checkpoint_id) for f in findings] == [("size-mismatch", full.checkpoint_id)]


def test_blob_paths_outside_the_store_are_refused() -> None:
    for bad in ("../x", "/etc/passwd", "a/../../b", "s3://elsewhere/x", "..", "a\\..\\b"):
        with pytest.raises(UnsafePath):
            safe_join("/store", bad)
    assert safe_join("/store", "blobs/r/1.json") == "/store/blobs/r/1.json"


def test_missing_and_foreign_stores_get_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound, match="store not found"):
        NativeReader(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ReaderError, match="not a Lastgood store"):
        NativeReader(str(tmp_path / "plain"))
    with pytest.raises(StoreNotFound):
        NativeWriter(str(tmp_path / "nope2"), create=False)


def test_unknown_codec_is_reported_not_decoded() -> None:
    with pytest.raises(DecodeError, match="unknown codec 'zstd'"):
        nf.decode_payload(b"{}", "zstd")


def test_msgpack_extension_types_never_execute() -> None:
    import msgpack

    payload = msgpack.packb({"x": msgpack.ExtType(3, b"os.system")})
    value = nf.decode_payload(payload, "msgpack")
    assert value["x"]["$ext"] == 3 and value["x"]["size"] == 9


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_patch_round_trip(old, new) -> None:
    assert apply_patch(old, make_patch(old, new)) == new


@settings(max_examples=200, deadline=None)
@given(json_values, st.lists(st.fixed_dictionaries({"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]),
                                                    "path": st.sampled_from(["", "/a", "/0", "/a/b", "/-", "/x~1y"]),
                                                    "from": st.sampled_from(["/a", "/0", ""]),
                                                    "value": json_values}), max_size=4))
def test_random_patches_apply_or_raise_patch_error(doc, patch) -> None:
    try:
        apply_patch(doc, patch)
    except PatchError:
        pass
