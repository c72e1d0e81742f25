"""The native store on a real S3 endpoint: written by the writer, indexed through the CLI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import s3fs

from tests.helpers import SECRET, lastgood_cli, write_store

pytestmark = pytest.mark.s3


def make_bucket(endpoint: str) -> tuple[s3fs.S3FileSystem, str]:
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    return fs, bucket


def test_index_ls_show_and_damage_on_s3(s3_env: dict[str, str], tmp_path: Path) -> None:
    fs, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    url = f"s3://{bucket}/agents"
    options = {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"], "key": "testing", "secret": "testing"}
    states = write_store(url, runs=2, steps=6, storage_options=options)
    done = lastgood_cli("ls", url, "--format", "json", home=tmp_path / "h", env=s3_env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 12 and {r["status"] for r in rows} == {"ok"}
    last = rows[-1]
    shown = json.loads(lastgood_cli("show", url, last["checkpoint_id"], "--format", "json",
                                  home=tmp_path / "h", env=s3_env).stdout)
    expected = states[last["run_id"]][last["step"]]
    assert shown["state"]["runtime"] == expected["runtime"]
    assert SECRET not in json.dumps(shown)
    victim = rows[3]
    blobs = fs.find(f"{bucket}/agents/blobs")
    fs.rm([p for p in blobs if victim["checkpoint_id"] in p])
    lastgood_cli("index", url, "--full", home=tmp_path / "h", env=s3_env)
    after = {r["checkpoint_id"]: r for r in json.loads(
        lastgood_cli("ls", url, "--format", "json", home=tmp_path / "h", env=s3_env).stdout)}
    assert after[victim["checkpoint_id"]]["status"] == "corrupt"
    assert "does not exist" in after[victim["checkpoint_id"]]["status_reason"]


def test_missing_bucket_prefix_is_a_clear_error(s3_env: dict[str, str], tmp_path: Path) -> None:
    _, bucket = make_bucket(s3_env["FSSPEC_S3_ENDPOINT_URL"])
    done = lastgood_cli("ls", f"s3://{bucket}/nothing-here", home=tmp_path / "h", env=s3_env)
    assert done.returncode == 2
    assert done.stderr.startswith("lastgood: error:") and done.stderr.count("\n") == 1
