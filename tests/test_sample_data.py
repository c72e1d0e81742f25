"""The committed sample store matches its generator and its manifest of damage."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.stores import index_store
from tests.helpers import ROOT, SAMPLE_STORE, load_manifest


def test_every_damaged_checkpoint_has_the_expected_status_and_check(tmp_path: Path) -> None:
    manifest = load_manifest()
    catalog = Catalog(tmp_path / "index.duckdb")
    summary = index_store(catalog, str(SAMPLE_STORE))
    sid = summary.store.store_id
    rows = {r["checkpoint_id"]: r for r in queries.list_checkpoints(catalog, sid)}
    assert len(rows) == manifest["checkpoints"]
    damaged = {d["checkpoint_id"]: d for d in manifest["damaged"]}
    assert len({d["damage"] for d in manifest["damaged"]}) >= 6
    for cid, expected in damaged.items():
        assert rows[cid]["status"] == expected["expected_status"], expected
        assert rows[cid]["status_reason"]
        checks = {f["check"] for f in queries.findings(catalog, sid, cid)}
        assert expected["expected_check"] in checks, (expected, checks)
    healthy = [r for cid, r in rows.items() if cid not in damaged]
    assert {r["status"] for r in healthy} == {"ok"}
    store_level = [f for f in queries.findings(catalog, sid) if f["checkpoint_id"] is None]
    for line in manifest["catalog_findings"]:
        assert any(f["check"] == line["expected_check"] and f"{line['file']}:{line['line']}" in f["message"]
                   for f in store_level)


def test_sample_has_the_promised_shape(tmp_path: Path) -> None:
    manifest = load_manifest()
    catalog = Catalog(tmp_path / "index.duckdb")
    sid = index_store(catalog, str(SAMPLE_STORE), check="none").store.store_id
    ov = queries.overview(catalog, sid)
    assert ov.agents >= 3 and ov.runs >= 12 and ov.checkpoints >= 2000
    triggers = {r["trigger"] for r in queries.list_checkpoints(catalog, sid)}
    assert {"periodic", "event", "manual", "final", "restore"} <= triggers
    kinds = set(queries.events(catalog, sid)["kind"])
    assert {"timeout", "crash", "restart"} <= kinds
    assert manifest["api_key"].startswith("sk-")


def test_generator_is_deterministic_and_reproduces_the_committed_manifest(tmp_path: Path) -> None:
    module = runpy.run_path(str(ROOT / "sample_data" / "generate.py"))
    manifest_path = tmp_path / "manifest.json"
    module["main"](["--out", str(tmp_path / "agents"), "--manifest", str(manifest_path)])
    regenerated = json.loads(manifest_path.read_text())
    assert regenerated == load_manifest()
    committed = sorted(p.relative_to(SAMPLE_STORE).as_posix() for p in SAMPLE_STORE.joinpath("blobs").rglob("*.json"))
    fresh = sorted(p.relative_to(tmp_path / "agents").as_posix() for p in (tmp_path / "agents" / "blobs").rglob("*.json"))
    assert committed == fresh
