"""The native store: writer and reader round trips, catalog compaction, bad input."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lastgood.errors import DecodeError, ReaderError, StoreNotFound, UnsafePath
from lastgood.readers.native import format as nf
from lastgood.readers.native import structure as native_structure
from lastgood.readers.base import as_table, record_from_row
from lastgood.readers.common.fsutil import safe_join
from lastgood.readers.common.jsonpatch import PatchError, apply_patch, make_patch
from lastgood.readers.native.reader import NativeReader
from lastgood.readers.native.writer import NativeWriter
from tests.helpers import lastgood_cli, write_store


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


# ---- set-based structure check (issue #8) and snapshot re-reads (issue #7) ----------

def _damaged_store(tmp_path: Path) -> str:
    """A compacted store plus a tail, with every kind of structure damage the check knows."""
    url = str(tmp_path / "s")
    write_store(url, runs=3, steps=6)
    NativeWriter(url).compact()
    write_store_more = NativeWriter(url)
    for i in range(4):
        write_store_more.save("run-tail", {"i": i})
    root = tmp_path / "s"
    _, records = scan_records(NativeReader(url))
    blobs = sorted((r for r in records if r.run_id != "run-tail"), key=lambda r: (r.run_id, r.step))
    (root / blobs[0].location).unlink()  # blob-missing
    (root / blobs[1].location).write_bytes(b"{}")  # size-mismatch
    (root / blobs[2].location).unlink()
    (root / blobs[2].location).mkdir()  # a folder where the blob should be
    outside = tmp_path / "outside.json"
    outside.write_bytes((root / blobs[3].location).read_bytes())
    (root / blobs[3].location).unlink()
    (root / blobs[3].location).symlink_to(outside)  # unsafe-path: resolves outside the store
    (root / blobs[4].location).unlink()
    os.mkfifo(root / blobs[4].location)  # not-a-file, never opened
    inside = root / "blobs" / "kept.json"
    inside.write_bytes((root / blobs[5].location).read_bytes())
    (root / blobs[5].location).unlink()
    (root / blobs[5].location).symlink_to(inside)  # a link inside the store: fine
    nested = root / "blobs" / "deep" / "er"
    nested.mkdir(parents=True)
    good = json.loads(nf.entry_line({**_entry(blobs[6]), "checkpoint_id": "nested"}))
    (nested / "n.json").write_bytes((root / blobs[6].location).read_bytes())
    odd = [
        good | {"location": "blobs/deep/er/n.json"},  # clean, two folders down
        good | {"checkpoint_id": "dotted", "location": "blobs/./deep/er/n.json"},  # same blob, odd path
        good | {"checkpoint_id": "escape", "location": "../outside.json"},  # unsafe-path
        good | {"checkpoint_id": "codec", "codec": "zstd"},  # unknown-codec
        good | {"checkpoint_id": "backslash", "location": "blobs\\deep\\er\\n.json"},  # unsafe-path
        good | {"checkpoint_id": "nowhere", "location": "catalog/none.json"},  # outside blobs/, missing
    ]
    (root / nf.TAIL / "zz-odd.jsonl").write_bytes(b"".join(nf.entry_line(e) for e in odd))
    (root / nf.PENDING / "p.json").write_text(json.dumps({
        "run_id": "run-0", "checkpoint_id": "never", "started_at": "2026-01-01T00:00:00Z",
        "codec": "json", "location": "blobs/run-0/never.json"}))  # incomplete
    return url


def _entry(record) -> dict:
    return {name: getattr(record, name) for name in nf.ENTRY_SCHEMA.names if name != "metadata"}


def _one_by_one(reader: NativeReader, records) -> list[tuple[str, str | None, str]]:
    found = []
    for record in records:  # each alone: the per-checkpoint check, never the set-based one
        found += [(str(f.check), f.checkpoint_id, f.message) for f in
                  reader.check_checkpoints([record], read_data=False)]
    return sorted(found)


def _count_walks(monkeypatch) -> list[str]:
    """The roots native_structure walks from now on (the walk itself still runs)."""
    walks: list[str] = []
    walk = native_structure.walk_local
    monkeypatch.setattr(native_structure, "walk_local", lambda root: walks.append(root) or walk(root))
    return walks


def test_set_based_structure_check_finds_what_the_per_checkpoint_check_finds(tmp_path: Path,
                                                                           monkeypatch) -> None:
    url = _damaged_store(tmp_path)
    walks = _count_walks(monkeypatch)
    reader = NativeReader(url)
    scan, records = scan_records(reader)
    expected = _one_by_one(NativeReader(url), records)
    assert {c for c, _, _ in expected} == {"blob-missing", "size-mismatch", "not-a-file", "unsafe-path",
                                          "unknown-codec", "incomplete"}
    assert {cid for _, cid, _ in expected} >= {"escape", "codec", "backslash", "nowhere", "never"}
    assert not {"nested", "dotted"} & {cid for _, cid, _ in expected}
    keys = [(r.run_id, r.namespace, r.checkpoint_id) for r in records]
    by_keys = sorted((str(f.check), f.checkpoint_id, f.message) for f in reader.check_structure(keys))
    assert by_keys == expected
    count, listed = reader.listed_structure(scan.token)
    assert count == len(records)
    assert sorted((str(f.check), f.checkpoint_id, f.message) for f in listed) == expected
    assert reader.listed_structure("not the listing") is None
    assert len(walks) == 2  # the blob tree was walked once per set-based check
    bare = [type(r)(run_id=r.run_id, namespace=r.namespace, checkpoint_id=r.checkpoint_id) for r in records]
    assert sorted((str(f.check), f.checkpoint_id, f.message)
                  for f in NativeReader(url).check_checkpoints(bare, read_data=False)) == expected


def test_structure_check_of_a_few_keys_needs_no_walk_and_agrees(tmp_path: Path, monkeypatch) -> None:
    url = _damaged_store(tmp_path)
    monkeypatch.setattr(native_structure, "walk_local", lambda root: pytest.fail("walked for 5 keys"))
    _, records = scan_records(NativeReader(url))
    few = [r for r in records if r.checkpoint_id in ("escape", "codec", "never", "nested")]
    few.append(min((r for r in records if r.run_id == "run-0" and r.step is not None), key=lambda r: r.step))
    reader = NativeReader(url)  # no scan of its own: the catalog is read for the lookup
    found = sorted((str(f.check), f.checkpoint_id, f.message)
                   for f in reader.check_structure([(r.run_id, r.namespace, r.checkpoint_id) for r in few]))
    assert found == _one_by_one(NativeReader(url), few)
    assert [c for c, _, _ in found].count("blob-missing") == 1


def test_index_records_the_same_findings_through_the_set_based_check(tmp_path: Path) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import index_store
    from lastgood.integrity.verify import store_findings

    url = _damaged_store(tmp_path)
    _, records = scan_records(NativeReader(url))
    expected = {(c, cid) for c, cid, _ in _one_by_one(NativeReader(url), records)}
    catalog = Catalog(":memory:")
    summary = index_store(catalog, url, check="structure")
    assert summary.verify is not None and summary.verify.checked == len(records)
    rows = store_findings(catalog, summary.store.store_id, "structure")
    assert {(r["check"], r["checkpoint_id"]) for r in rows if r["depth"] == "structure"} == expected
    with catalog.connect() as con:
        statuses = dict(con.execute("SELECT checkpoint_id, status FROM checkpoints").fetchall())
    assert statuses["never"] == "incomplete" and statuses["escape"] == "corrupt"
    assert statuses["nested"] == statuses["dotted"] == "ok"


class _CompactedUnderneath(NativeReader):
    """A reader whose first ``times`` reads of a part find it gone: each time a real writer
    saves and compacts first, so the catalog really changed under the listing."""

    def __init__(self, url: str, times: int) -> None:
        super().__init__(url)
        self.times, self.writer = times, NativeWriter(url)

    def _parts(self, names, findings, *rest):
        if self.times > 0:
            self.times -= 1
            self.writer.save("busy", {"n": self.times})
            self.writer.compact()
        return super()._parts(names, findings, *rest)


def test_reading_during_compactions_retries_while_the_catalog_keeps_changing(tmp_path: Path) -> None:
    from lastgood import limits

    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=3)
    NativeWriter(url).compact()
    reader = _CompactedUnderneath(url, times=15)  # more than the 10 attempts there used to be
    scan, records = scan_records(reader)
    assert reader.times == 0 and scan.full
    assert len(records) == 3 + 15 and len({r.checkpoint_id for r in records}) == len(records)

    class Stuck(NativeReader):  # a listed part that can never be read, the listing unchanged
        attempts = 0

        def _parts(self, names, findings, *rest):
            Stuck.attempts += 1
            raise FileNotFoundError(names[0] if names else "part")

    with pytest.raises(ReaderError, match="kept changing"):
        Stuck(url).scan()
    assert Stuck.attempts == limits.SNAPSHOT_STALLED + 1
    Stuck.attempts = 0
    with pytest.raises(ReaderError, match="kept changing"):  # the structure check's catalog read too
        Stuck(url).check_structure([("run-0", "", "x")])
    assert Stuck.attempts == limits.SNAPSHOT_STALLED + 1


def test_a_big_listing_walks_the_blob_tree_ahead_and_the_check_uses_that_walk(tmp_path: Path,
                                                                              monkeypatch) -> None:
    url = _damaged_store(tmp_path)
    monkeypatch.setattr(native_structure, "WALK_AHEAD_ROWS", 1)  # the 1M store's path, on a small store
    walks = _count_walks(monkeypatch)
    reader = NativeReader(url)
    scan, records = scan_records(reader)
    expected = _one_by_one(NativeReader(url), records)
    count, listed = reader.listed_structure(scan.token)
    assert sorted((str(f.check), f.checkpoint_id, f.message) for f in listed) == expected
    assert count == len(records) and len(walks) == 1  # the walk started by the scan, used once
    reader.listed_structure(scan.token)
    assert len(walks) == 2  # a later check walks again


def test_index_refresh_retries_while_compactions_keep_removing_what_it_listed(tmp_path: Path) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import OpenStore, refresh_consistent

    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=3)
    NativeWriter(url).compact()

    class CompactsAfterListing(NativeReader):  # each listed part is gone before the index reads it
        times = 15  # more than the 10 attempts there used to be

        def scan(self, since=None):
            scan = super().scan(since)
            if CompactsAfterListing.times > 0:
                CompactsAfterListing.times -= 1
                writer = NativeWriter(url)
                writer.save("busy", {"n": CompactsAfterListing.times})
                writer.compact()
            return scan

    catalog = Catalog(":memory:")
    store = OpenStore(url, catalog.store_id(url, "native", url), CompactsAfterListing(url))
    report = refresh_consistent(catalog, store)
    assert CompactsAfterListing.times == 0 and report.checkpoints == 3 + 15
    with catalog.connect() as con:
        assert con.execute("SELECT count(DISTINCT checkpoint_id), count(*) FROM checkpoints").fetchall() == [(18, 18)]


# ---- blob walk only up to LASTGOOD_AUTO_WALK_ENTRIES (issue #8's product decision) ------------

CATALOG_LEVEL = {"escape", "codec", "backslash", "never"}  # what _damaged_store's catalog alone shows


def test_catalog_level_check_finds_what_the_catalog_shows_without_walking(tmp_path: Path,
                                                                         monkeypatch) -> None:
    url = _damaged_store(tmp_path)
    monkeypatch.setattr(native_structure, "walk_local", lambda root: pytest.fail("walked the blobs"))
    reader = NativeReader(url)
    scan, records = scan_records(reader)
    expected = [f for f in _one_by_one(NativeReader(url), records) if f[1] in CATALOG_LEVEL]
    assert {c for c, _, _ in expected} == {"unsafe-path", "unknown-codec", "incomplete"}
    count, found = reader.listed_catalog_structure(scan.token)
    assert count == len(records)
    assert sorted((str(f.check), f.checkpoint_id, f.message) for f in found) == expected
    assert reader.listed_catalog_structure("not the listing") is None
    entries, _ = reader._entries(scan.token)
    try:  # only entries the SQL cannot clear reach the per-checkpoint code
        assert {r.checkpoint_id for r in entries.catalog_unclean()} == CATALOG_LEVEL | {"dotted", "nowhere"}
    finally:
        entries.close()


def _ls(store: str, home: Path, env: dict[str, str]) -> list[dict]:
    done = lastgood_cli("ls", store, "--format", "json", home=home, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_store_beyond_the_walk_limit_leaves_blob_checks_pending_until_verify(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=6)
    home = tmp_path / "home"
    limit = {"LASTGOOD_AUTO_WALK_ENTRIES": "5", "LASTGOOD_AUTO_DATA_BYTES": "0"}  # 12 > 5; no data check
    _, records = scan_records(NativeReader(url))
    gone = max(records, key=lambda r: (r.run_id, r.step))  # a head: no incremental child depends on it
    (tmp_path / "s" / gone.location).unlink()
    report = json.loads(lastgood_cli("index", url, "--format", "json", home=home, env=limit).stdout)
    assert report["check"] == "structure" and report["blobs_pending"] == len(records) == 12
    assert not [f for f in report["findings"] if f["checkpoint_id"] == gone.checkpoint_id]
    rows = _ls(url, home, limit)
    assert {r["status"] for r in rows} == {"ok"} and not any(r["data_checked"] for r in rows)
    table = lastgood_cli("ls", url, home=home, env=limit).stdout
    assert "blob check pending for 12" in table and "lastgood verify STORE" in table  # "ok" is not "looked at"
    assert "blob check pending for 12" in lastgood_cli("index", url, home=home, env=limit).stdout

    verify = lastgood_cli("verify", url, "--format", "json", home=home, env=limit)
    assert verify.returncode == 1, verify.stderr  # verify always walks the blobs
    errors = {(f["check"], f["checkpoint_id"]) for f in json.loads(verify.stdout)["findings"]
              if f["severity"] == "error"}
    assert errors == {("blob-missing", gone.checkpoint_id)}
    rows = _ls(url, home, limit)
    assert {r["checkpoint_id"] for r in rows if r["status"] != "ok"} == {gone.checkpoint_id}  # ls agrees
    table = lastgood_cli("ls", url, home=home, env=limit).stdout
    assert "blob check pending" not in table and "data check pending for 12" in table
    again = json.loads(lastgood_cli("index", url, "--format", "json", home=home, env=limit).stdout)
    assert again["blobs_pending"] == 0 and ("blob-missing", gone.checkpoint_id) in {
        (f["check"], f["checkpoint_id"]) for f in again["findings"]}


def test_a_store_within_the_walk_limit_finds_a_missing_blob_at_once(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=6)
    _, records = scan_records(NativeReader(url))
    gone = max(records, key=lambda r: (r.run_id, r.step))
    (tmp_path / "s" / gone.location).unlink()
    home, no_data = tmp_path / "home", {"LASTGOOD_AUTO_DATA_BYTES": "0"}  # default walk limit: 100,000
    report = json.loads(lastgood_cli("index", url, "--format", "json", home=home, env=no_data).stdout)
    assert report["blobs_pending"] == 0
    assert ("blob-missing", gone.checkpoint_id) in {(f["check"], f["checkpoint_id"]) for f in report["findings"]}
    rows = _ls(url, home, no_data)
    assert {r["checkpoint_id"] for r in rows if r["status"] != "ok"} == {gone.checkpoint_id}


def test_walk_limit_must_be_a_number(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=1, steps=2)
    done = lastgood_cli("index", url, home=tmp_path / "home", env={"LASTGOOD_AUTO_WALK_ENTRIES": "many"})
    assert done.returncode == 2 and "LASTGOOD_AUTO_WALK_ENTRIES" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_reopen_that_lists_nothing_new_imports_no_pyarrow(tmp_path: Path) -> None:
    import subprocess
    import sys

    url, home = str(tmp_path / "s"), tmp_path / "home"
    write_store(url, runs=2, steps=3)
    assert lastgood_cli("index", url, home=home).returncode == 0
    probe = ("import sys; from lastgood.cli.main import main; sys.argv = ['lastgood', 'index', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print('pyarrow' in sys.modules, 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, url], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, LASTGOOD_HOME=str(home)))
    assert done.returncode == 0, done.stderr
    assert "indexed" in done.stdout and done.stdout.splitlines()[-1] == "False False"


def test_a_store_of_one_compacted_part_is_checked_in_place_with_the_same_findings(tmp_path: Path) -> None:
    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=6)
    NativeWriter(url).compact()
    reader = NativeReader(url)
    scan, records = scan_records(reader)
    assert not list((tmp_path / "s" / nf.TAIL).glob("*.jsonl"))  # one part, nothing else: the view path
    (tmp_path / "s" / records[0].location).unlink()
    (tmp_path / "s" / records[1].location).write_bytes(b"{}")
    expected = _one_by_one(NativeReader(url), records)
    assert {c for c, _, _ in expected} >= {"blob-missing", "size-mismatch"}
    count, found = reader.listed_structure(scan.token)
    assert count == len(records) and sorted((str(f.check), f.checkpoint_id, f.message) for f in found) == expected
    assert reader.listed_catalog_structure(scan.token) == (len(records), [])
