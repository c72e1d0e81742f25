"""Full reads on a real S3 endpoint (moto's server): blobs fetched concurrently, one multi-path
request per chunk, and exactly the findings of the same store read from a local folder."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from lastgood.integrity import parallel
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store
from lastgood.integrity.verify import store_findings, verify_store
from tests.helpers import lastgood_cli, write_store
from tests.test_s3 import make_bucket

pytestmark = pytest.mark.s3


def _findings(catalog: Catalog, sid: int) -> list[tuple[str, str, str]]:
    return sorted((f["checkpoint_id"] or "", f["check"], f["severity"]) for f in store_findings(catalog, sid))


def test_s3_full_read_is_concurrent_and_equals_a_local_read(s3_env: dict[str, str], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fs, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    url = f"s3://{bucket}/agents"
    options = {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"}
    write_store(url, runs=2, steps=10, storage_options=options)
    blobs = sorted(fs.find(f"{bucket}/agents/blobs"))
    data = bytearray(fs.cat_file(blobs[3]))
    data[-2] ^= 0x01
    fs.pipe_file(blobs[3], bytes(data))  # same size: only the data check sees it
    fs.rm(blobs[11])
    local = tmp_path / "local"
    fs.get(f"{bucket}/agents", str(local), recursive=True)

    batches: list[int] = []
    original = parallel.fetch_blobs

    def counting(reader: object, fs: object, records: list[object], ancestors: object = ()) -> dict[str, bytes]:
        blobs = original(reader, fs, records, ancestors)  # type: ignore[arg-type]
        batches.append(len(blobs))
        return blobs

    monkeypatch.setattr(parallel, "fetch_blobs", counting)
    # fsspec read FSSPEC_S3_ENDPOINT_URL when it was imported; in this process set its config directly
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    remote = Catalog(tmp_path / "remote.duckdb")
    summary = index_store(remote, url, check="none")
    report = verify_store(remote, summary.store.store_id, summary.store.reader, read_data=True, workers=1)
    assert report.checked == 20 and batches == [19]  # one multi-path fetch for the chunk (one blob deleted)

    here = Catalog(tmp_path / "local.duckdb")
    local_summary = index_store(here, str(local), check="none")
    verify_store(here, local_summary.store.store_id, local_summary.store.reader, read_data=True)
    found = _findings(remote, summary.store.store_id)
    assert found == _findings(here, local_summary.store.store_id)
    assert {check for _, check, severity in found if severity == "error"} >= {"sha256-mismatch", "blob-missing"}

    done = lastgood_cli("verify", url, "--read-data", "--workers", "2", "--format", "json",
                        home=tmp_path / "home", env=s3_env)
    assert done.returncode == 1, done.stderr
    assert sorted((f["checkpoint_id"] or "", f["check"], f["severity"])
                  for f in json.loads(done.stdout)["findings"]) == found


def test_s3_full_read_sends_one_get_per_blob_and_fetches_ahead(s3_env: dict[str, str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No HEAD before each GET (s3fs sends one unless told not to), and in-process the next
    chunk's blobs are being fetched while a chunk is checked."""
    import threading

    import s3fs

    from lastgood.integrity import verify

    fs, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    url = f"s3://{bucket}/agents"
    write_store(url, runs=2, steps=10, storage_options={
        "endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"})
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, url, check="none")
    monkeypatch.setattr(verify, "CHUNK", 5)

    sizes: list[str] = []
    original_size = s3fs.S3FileSystem._size

    async def counting_size(self: s3fs.S3FileSystem, path: str) -> int:
        sizes.append(path)
        return await original_size(self, path)

    fetches: list[int] = []
    second_fetch = threading.Event()
    overlapped: list[bool] = []
    original_fetch, original_check = parallel.fetch_blobs, parallel.check_chunk

    def fetch(reader: object, fs: object, records: list[object], ancestors: object = ()) -> dict[str, bytes]:
        fetches.append(len(records))
        if len(fetches) == 2:
            second_fetch.set()
        return original_fetch(reader, fs, records, ancestors)  # type: ignore[arg-type]

    def check(*args: object) -> parallel.ChunkResult:
        if not overlapped:  # the first chunk: the second one's fetch starts meanwhile
            overlapped.append(second_fetch.wait(10))
        return original_check(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(s3fs.S3FileSystem, "_size", counting_size)
    monkeypatch.setattr(parallel, "fetch_blobs", fetch)
    monkeypatch.setattr(parallel, "check_chunk", check)
    report = verify.verify_store(catalog, summary.store.store_id, summary.store.reader, read_data=True, workers=1)
    assert report.checked == 20 and fetches == [5, 5, 5, 5]
    assert overlapped == [True]
    assert sizes == []  # one GET per blob, no HEAD
    assert not [f for f in store_findings(catalog, summary.store.store_id) if f["severity"] == "error"]


def _blob_requests(caplog: pytest.LogCaptureFixture, bucket: str) -> list[str]:
    """The request lines moto's server logged for the store's blobs (GETs and blob-folder LISTs)."""
    lines = [r.getMessage() for r in caplog.records if r.name == "werkzeug"]
    return [line for line in lines if f"/{bucket}/agents/blobs/" in line or "prefix=agents/blobs" in line
            or "prefix=agents%2Fblobs" in line]


def test_s3_workers_fetch_a_chunk_with_its_ancestors_and_list_no_blob_folder(
        s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Worker processes on S3: each fetches its own chunk in parts (whole-object GETs, the next part
    while one is checked); the earlier checkpoints a chunk's first incremental states are rebuilt
    from come in the same batch (no ranged read of one blob after another), the fetched bytes give
    the sizes (no listing of a blob folder), and the findings are those of a local read."""
    import logging

    from lastgood.integrity import verify

    fs, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    url = f"s3://{bucket}/agents"
    write_store(url, runs=2, steps=10, storage_options={
        "endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"})
    catalog = Catalog(tmp_path / "index.duckdb")
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    summary = index_store(catalog, url, check="none")
    with catalog.connect() as con:
        rows = con.execute("SELECT run_id, step, checkpoint_id, location FROM checkpoints WHERE store_id = ?",
                           [summary.store.store_id]).fetchall()
    by_step = {(run, step): {"checkpoint_id": cid, "location": location} for run, step, cid, location in rows}
    damaged = f"{bucket}/agents/{by_step['run-0', 3]['location']}"  # incremental; its child (step 4) is full
    data = bytearray(fs.cat_file(damaged))
    data[-2] ^= 0x01
    fs.pipe_file(damaged, bytes(data))
    fs.rm(f"{bucket}/agents/{by_step['run-1', 9]['location']}")  # the last: nothing is rebuilt from it
    local = tmp_path / "local"
    fs.get(f"{bucket}/agents", str(local), recursive=True)

    # chunks of 8 (the third, run-1's steps 6-9, rebuilds from steps 4-5 of the one before), parts of 4
    monkeypatch.setattr(verify, "CHUNK", 8)
    monkeypatch.setattr(parallel, "FETCH_PART", 4)
    caplog.set_level(logging.INFO, logger="werkzeug")
    report = verify_store(catalog, summary.store.store_id, summary.store.reader, read_data=True, workers=2)
    assert report.checked == 20 and report.workers == 2
    requests = _blob_requests(caplog, bucket)
    assert not [line for line in requests if "list-type" in line and "delimiter" in line
                and not line.split("prefix=", 1)[1].split("&", 1)[0].endswith(".json%2F")
                and not line.split("prefix=", 1)[1].split("&", 1)[0].endswith(".json/")], requests
    assert not [line for line in requests if '" 206' in line], requests  # no ranged (one-blob) read
    heads = [line for line in requests if line.split('"')[1].startswith("HEAD ")]
    assert len(heads) <= 1, heads  # sizes from the GETs: only the missing blob is asked for on its own
    assert len([line for line in requests if line.split('"')[1].startswith("GET ") and '" 200' in line]) >= 19

    here = Catalog(tmp_path / "local.duckdb")
    local_summary = index_store(here, str(local), check="none")
    verify_store(here, local_summary.store.store_id, local_summary.store.reader, read_data=True)
    found = _findings(catalog, summary.store.store_id)
    assert found == _findings(here, local_summary.store.store_id)
    errors = {(cid, check) for cid, check, severity in found if severity == "error"}
    assert errors == {(by_step["run-0", 3]["checkpoint_id"], "sha256-mismatch"),
                      (by_step["run-1", 9]["checkpoint_id"], "blob-missing")}


def test_first_look_at_an_object_store_leaves_the_blob_walk_to_verify(s3_env: dict[str, str], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A first `ls` of an object store beyond stores.AUTO_WALK_REMOTE_ENTRIES checks the catalog only
    (its blob listing is one request per 1,000 objects, one after another) and says so;
    LASTGOOD_AUTO_WALK_ENTRIES set by the user decides instead."""
    from lastgood import stores

    fs, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    url = f"s3://{bucket}/agents"
    write_store(url, runs=2, steps=6, storage_options={
        "endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"})
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    monkeypatch.setenv("LASTGOOD_AUTO_DATA_BYTES", "0")
    monkeypatch.setattr(stores, "AUTO_WALK_REMOTE_ENTRIES", 10)  # 12 checkpoints: beyond it
    monkeypatch.delenv("LASTGOOD_AUTO_WALK_ENTRIES", raising=False)
    catalog = Catalog(tmp_path / "remote.duckdb")
    summary = index_store(catalog, url)
    assert stores.blobs_pending(catalog, summary.store.store_id) == 12

    monkeypatch.setenv("LASTGOOD_AUTO_WALK_ENTRIES", "100")  # the user's word: walk stores up to 100
    walked = Catalog(tmp_path / "walked.duckdb")
    summary = index_store(walked, url)
    assert stores.blobs_pending(walked, summary.store.store_id) == 0
