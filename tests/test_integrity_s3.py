"""Full reads on a real S3 endpoint (moto's server): blobs fetched concurrently, one multi-path
request per chunk, and exactly the findings of the same store read from a local folder."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from lastgood import parallel
from lastgood.catalog import Catalog
from lastgood.stores import index_store
from lastgood.verify import store_findings, verify_store
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
    original = parallel._prefetched.__enter__

    def counting(self: parallel._prefetched) -> None:
        batches.append(len(self.paths))
        original(self)

    monkeypatch.setattr(parallel._prefetched, "__enter__", counting)
    # fsspec read FSSPEC_S3_ENDPOINT_URL when it was imported; in this process set its config directly
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})
    remote = Catalog(tmp_path / "remote.duckdb")
    summary = index_store(remote, url, check="none")
    report = verify_store(remote, summary.store.store_id, summary.store.reader, read_data=True, workers=1)
    assert report.checked == 20 and batches == [20]  # one concurrent multi-path fetch for the whole chunk

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
