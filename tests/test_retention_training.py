"""Prune and undo on the training stores written by the real libraries (torch DCP, Orbax, DeepSpeed,
Lightning; sample_data/training/): checkpoints renamed into ``.lastgood/archive/<action>/`` and back,
byte for byte; each format's head and what it always keeps stay; the framework's own resolution
(mirrored: none of the libraries is installed here) picks the same checkpoint after the prune; a
prune or an undo killed at every point (before each rename, before the entry) leaves each folder in
the store or the archive and is rolled forward by the next action (the FolderRecovery journal;
tests/test_retention_hf_trainer.py kills the OperationsJournal one); on S3 (moto) the renames are copies
then deletes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lastgood import retention
from lastgood.errors import ConflictError
from lastgood.index import queries
from lastgood.index.catalog import Catalog
from lastgood.readers import journal as jr
from lastgood.readers.base import Capability, capabilities
from lastgood.readers.dcp.retention import DcpRetention
from lastgood.readers.registry import open_reader
from lastgood.readers.training_folders.journal import ARCHIVE
from lastgood.retention.policy import Policy
from lastgood.stores import index_store
from tests.cli_inprocess import run_cli
from tests.helpers import lastgood_cli
from tests.test_reader_dcp import make_store as dcp_store
from tests.test_reader_deepspeed import make_saves as deepspeed_store
from tests.test_reader_deepspeed import resolve_tag
from tests.test_reader_lightning import make_store as lightning_base
from tests.test_reader_orbax import make_store as orbax_base
from tests.training_stores import T0, prune_killed_after_first_op, stamp_in_order

V0, V1 = "lightning_logs/version_0", "lightning_logs/version_1"
ORBAX_TMP = "60.orbax-checkpoint-tmp-1700000000"  # an unfinished save: Orbax ignores it, so does prune
ORBAX_STEP = re.compile(r"^\d+$")  # orbax step_lookup: a step folder is named by its integer step
LAST = re.compile(r"^last(-(\d+))?\.ckpt$")


# ---- the stores, and each framework's own resolution of "latest" (mirrored) --------------------------


def dcp(tmp: Path) -> Path:
    root = dcp_store(tmp)
    for run in ("runA", "runB"):
        stamp_in_order(root / run, "step-*")
    return root


def orbax(tmp: Path) -> Path:
    root = orbax_base(tmp)
    shutil.copytree(root / "runA" / "40", root / "runA" / ORBAX_TMP)
    return root


def lightning(tmp: Path) -> Path:
    """version_0 (Lightning's own, best_model_path = step 10) and version_1; files' times in step order."""
    root = lightning_base(tmp)
    for run in (V0, V1):
        folder = root / run / "checkpoints"
        files = sorted((p for p in folder.iterdir() if not LAST.match(p.name)),
                       key=lambda p: int(p.stem.split("=")[-1]))
        for n, path in enumerate([*files, folder / "last.ckpt"]):
            os.utime(path, (T0 + 60 * n, T0 + 60 * n))
    return root


def dcp_latest(root: Path, run: str) -> str:
    """A script resuming from the newest step folder it sees."""
    return max((p for p in (root / run).iterdir() if (p / ".metadata").is_file()), key=lambda p: int(p.name[5:])).name


def orbax_latest(root: Path, run: str) -> str:
    """``CheckpointManager(dir).latest_step()``: the highest finalized step folder (tmp ones ignored)."""
    return str(max(int(p.name) for p in (root / run).iterdir() if p.is_dir() and ORBAX_STEP.match(p.name)))


def lightning_last(root: Path, run: str) -> str:
    """``fit(ckpt_path="last")``: the newest ``last(-N)?.ckpt`` of the checkpoint folder, by mtime."""
    found = [p for p in (root / run / "checkpoints").iterdir() if LAST.match(p.name)]
    return hashlib.sha256(max(found, key=lambda p: p.stat().st_mtime).read_bytes()).hexdigest()


# format: (store, reader, forgotten after --keep-last 1, what the framework resumes from per run)
FORMATS: dict[str, tuple[Callable[[Path], Path], str, set[tuple[str, str]], Callable[[Path], dict[str, str]]]] = {
    "torch-dcp": (dcp, "torch-dcp", {("runA", "step-10"), ("runA", "step-20"), ("runB", "step-15")},
                  lambda r: {run: dcp_latest(r, run) for run in ("runA", "runB")}),
    "orbax": (orbax, "orbax", {("runA", "10"), ("runA", "20"), ("runA", "30"), ("runB", "15")},
              lambda r: {run: orbax_latest(r, run) for run in ("runA", "runB")}),
    "deepspeed": (deepspeed_store, "deepspeed",
                  {("run-a", "global_step5"), ("run-a", "global_step10"), ("run-b", "global_step5")},
                  lambda r: {run: str(resolve_tag(r / run)) for run in ("run-a", "run-b")}),
    "lightning": (lightning, "lightning", {(V0, "epoch=0-step=5.ckpt"), (V0, "epoch=1-step=15.ckpt"),
                                           (V1, "epoch=0-step=6.ckpt"), (V1, "epoch=1-step=12.ckpt")},
                  lambda r: {run: lightning_last(r, run) for run in (V0, V1)}),
}


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file outside ``.lastgood``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".lastgood" not in p.parts}


def _cli(home: Path) -> Callable[..., Any]:
    """``lastgood ARGS --format json``: in this process, except the prune itself (the real console script)."""
    def cli(*args: str) -> Any:
        run = lastgood_cli if "--yes" in args and args[0] == "prune" else run_cli
        done = run(*args, "--format", "json", home=home, env={"LASTGOOD_OPERATOR": "t"})
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return json.loads(done.stdout)
    return cli


def _keys(rows: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(r["run_id"], r["checkpoint_id"]) for r in rows}


# ---- every format, end to end through the CLI ------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_cli_dry_run_prune_ls_storage_and_undo_byte_for_byte(fmt: str, tmp_path: Path) -> None:
    make, reader, forgotten, resumes = FORMATS[fmt]
    root, cli = make(tmp_path), _cli(tmp_path / "home")
    assert Capability.RETENTION in capabilities(open_reader(str(root), reader))
    before, resumed = tree(root), resumes(root)
    plan = cli("prune", str(root), "--keep-last", "1", "--dry-run")
    assert plan["dry_run"] and _keys(plan["forget"]) == forgotten and plan["reader"] == reader
    assert tree(root) == before and not (root / ARCHIVE).exists()  # a dry run writes nothing
    done = cli("prune", str(root), "--keep-last", "1", "--reason", "tidy", "--yes")
    assert done["checkpoints"] == len(forgotten) and done["skipped"] == []
    assert done["bytes"] == plan["summary"]["bytes_forget"] and done["space"]["returned_bytes"] == 0
    kept = _keys(cli("ls", str(root)))
    assert _keys(plan["keep"]) <= kept and not kept & forgotten  # and saves in progress (orbax tmp)
    assert resumes(root) == resumed  # the framework resumes from the same checkpoint
    archived = root / ARCHIVE / done["action_id"]
    assert sum(1 for p in archived.rglob("*") if p.is_file()) == len(before) - len(tree(root))
    storage = cli("storage", str(root))
    assert storage["store"]["prunable"] is True
    assert storage["footprint"]["files"]["archive"] >= done["bytes"]
    tables = {r["table"]: r for r in storage["tables"]}
    assert "archive" in tables and tables["checkpoints"]["bytes"] == plan["summary"]["bytes_keep"], tables
    cli("undo", str(root), done["action_id"], "--reason", "back", "--yes")
    assert tree(root) == before and not archived.exists()
    catalog, store = _open(tmp_path, root, reader)  # the index, re-listed in process (one CLI start less)
    assert _keys(queries.list_checkpoints(catalog, store.store_id)) >= kept | forgotten and resumes(root) == resumed
    entries = open_reader(str(root), reader).recovery().journal_entries()
    assert jr.verify_chain(entries).ok and [e["action"] for e in entries] == ["prune", "undo"]


# ---- what each format always keeps ---------------------------------------------------------------


def _open(tmp: Path, root: Path, reader: str) -> tuple[Catalog, Any]:
    catalog = Catalog(tmp / "home" / "index.duckdb")
    return catalog, index_store(catalog, str(root), reader_name=reader, check="none").store


def _why(plan: Any) -> dict[tuple[str, str], list[str]]:
    return {(r["run_id"], r["checkpoint_id"]): r["reasons"] for r in plan.checkpoints(keep=True)}


def test_dcp_folders_a_restore_moved_aside_are_never_pruned(tmp_path: Path) -> None:
    from lastgood import recovery

    root = dcp(tmp_path)
    catalog, store = _open(tmp_path, root, "torch-dcp")
    done = recovery.apply_plan(catalog, store, recovery.plan_rollback(catalog, store, "runA", "runA/step-10"),
                               reason="loss spiked", operator="t")
    aside = root / ".lastgood" / "quarantine" / done.action_id / "runA"
    moved = tree(aside)
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert _keys(plan.checkpoints(keep=False)) == {("runB", "step-15")}
    assert any("moved aside by" in r for r in _why(plan)[("runA", "step-20")])  # named by no journal entry
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert tree(aside) == moved and dcp_latest(root, "runA") == "step-10"
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, done.action_id), reason="undo", operator="t")
    assert dcp_latest(root, "runA") == "step-30"  # the rollback still undoes after the prune


def test_orbax_unfinished_saves_are_never_touched(tmp_path: Path) -> None:
    root = orbax(tmp_path)
    catalog, store = _open(tmp_path, root, "orbax")
    unfinished = tree(root / "runA" / ORBAX_TMP)
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert ("runA", ORBAX_TMP) not in _keys(plan.checkpoints(keep=False)) and plan.summary["incomplete"] == 1
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert tree(root / "runA" / ORBAX_TMP) == unfinished
    assert sorted(p.name for p in (root / "runA").iterdir()) == ["40", ORBAX_TMP] and orbax_latest(root, "runA") == "40"


def test_deepspeed_keeps_latest_and_latest_universal_and_refuses_a_moved_head(tmp_path: Path) -> None:
    root = deepspeed_store(tmp_path)
    (root / "run-a" / "latest_universal").write_text("global_step5")
    catalog, store = _open(tmp_path, root, "deepspeed")
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert _keys(plan.checkpoints(keep=False)) == {("run-a", "global_step10"), ("run-b", "global_step5")}
    assert any("latest_universal" in r for r in _why(plan)[("run-a", "global_step5")])
    (root / "run-a" / "latest").write_text("global_step10")  # a restore by hand meanwhile: the head moved
    with pytest.raises(ConflictError, match="must be kept"):
        retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert (root / "run-a" / "global_step10").is_dir() and not (root / ARCHIVE).exists()
    assert store.reader.retention().pending() == []  # refused before anything moved: no intent left


def test_lightning_keeps_best_model_path_last_files_and_what_a_restore_archived(tmp_path: Path) -> None:
    from lastgood import recovery

    root = lightning(tmp_path)
    last = root / V1 / "checkpoints" / "last.ckpt"
    shutil.copyfile(root / V0 / "checkpoints" / "epoch=0-step=5.ckpt", last)  # a last file equal to no save of V1
    original = hashlib.sha256(last.read_bytes()).hexdigest()
    catalog, store = _open(tmp_path, root, "lightning")
    done = recovery.apply_plan(catalog, store, recovery.plan_restore(catalog, store, f"{V1}/epoch=0-step=6.ckpt"),
                               reason="test", operator="t")
    archived_last = root / ARCHIVE / done.action_id / V1 / "checkpoints" / "last.ckpt"
    assert hashlib.sha256(archived_last.read_bytes()).hexdigest() == original
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    why, forget = _why(plan), _keys(plan.checkpoints(keep=False))
    assert any("best-model-path" in r for r in why[(V0, "epoch=1-step=10.ckpt")])
    always = store.reader.retention().layout().kept  # what the format keeps beyond the core's rules
    standalone = [k for k, rule in always.items() if rule == f"archived by {done.action_id}"]
    assert [k[0] for k in standalone] == [V1] and standalone[0][1].startswith("last.ckpt#") and standalone[0] in why
    assert (V0, "epoch=1-step=10.ckpt") not in forget and (V1, "epoch=1-step=12.ckpt") in forget
    result = retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert result.checkpoints == len(forget) and archived_last.is_file() and last.is_file()
    recovery.apply_plan(catalog, store, recovery.plan_undo(catalog, store, done.action_id), reason="undo", operator="t")
    assert hashlib.sha256(last.read_bytes()).hexdigest() == original  # the restore still undoes after the prune


def test_lightning_keeps_the_file_a_last_link_points_to(tmp_path: Path) -> None:
    root = lightning(tmp_path)
    folder = root / V1 / "checkpoints"
    shutil.copyfile(folder / "epoch=2-step=18.ckpt", folder / "last-v1.ckpt")  # the newest last file: the head
    (folder / "last.ckpt").unlink()
    (folder / "last.ckpt").symlink_to("epoch=1-step=12.ckpt")  # save_last="link", an older one
    catalog, store = _open(tmp_path, root, "lightning")
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert {k for k in _keys(plan.checkpoints(keep=False)) if k[0] == V1} == {(V1, "epoch=0-step=6.ckpt")}
    assert any("a last file links to it" in r for r in _why(plan)[(V1, "epoch=1-step=12.ckpt")])
    retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert (folder / "last.ckpt").resolve().is_file()  # the link still resolves


# ---- a kill in the middle, the FolderRecovery journal -------------------------------------------------


def test_a_prune_killed_after_its_first_rename_is_rolled_forward_by_the_next_action(tmp_path: Path) -> None:
    root = dcp(tmp_path)
    catalog, store = _open(tmp_path, root, "torch-dcp")
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    entry = prune_killed_after_first_op(lambda: DcpRetention(str(root)), plan.forget_table(catalog), plan.archive)
    archived = root / ARCHIVE / entry["id"]
    backend = DcpRetention(str(root))
    assert [p["retention"] for p in backend.pending()] == ["prune"]
    assert sum(1 for _ in archived.rglob(".metadata")) == 1  # each folder in the store or the archive
    # the next action of any kind (here: a rollback's lock, through the recovery backend) rolls it forward
    recovery = store.reader.recovery()
    recovery._release(recovery._acquire("next"))
    assert backend.pending() == [] and sum(1 for _ in archived.rglob(".metadata")) == 3
    entries = recovery.journal_entries()
    assert jr.verify_chain(entries).ok and entries[-1]["id"] == entry["id"]
    assert {(i["run_id"], i["checkpoint_id"]) for i in entries[-1]["note"]["manifest"]} == FORMATS["torch-dcp"][2]
    assert dcp_latest(root, "runA") == "step-30" and dcp_latest(root, "runB") == "step-25"


def _entry(action: str, **extra: Any) -> dict[str, Any]:
    return {"id": jr.new_action_id(), "time": jr.now_iso(), "operator": "k", "action": action, "reason": "r",
            "run_id": None, "namespace": "", "target": None, "previous_head": None, "superseded": [],
            "undo_of": None, "marks": jr.empty_marks(), "note": {}, **extra}


def _killed_at(root: Path, step: int, act: Callable[[DcpRetention], Any]) -> None:
    """``act`` in a child process SIGKILL-like at ``step``: before its ``step``-th move (0-based), or —
    ``step`` = the number of moves — after every move, before the journal entry."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the killed process
        backend = DcpRetention(str(root))
        real_apply, real_entry, done = backend.recovery.apply, backend.recovery._write_entry, [0]

        def apply(op: Any) -> None:
            if done[0] == step:
                os._exit(9)
            real_apply(op)
            done[0] += 1

        def write_entry(entry: Any) -> None:
            if done[0] == step:
                os._exit(9)
            real_entry(entry)

        backend.recovery.apply, backend.recovery._write_entry = apply, write_entry  # type: ignore[method-assign]
        act(backend)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] != 0


def _each_in_one_place(root: Path, manifest: list[dict[str, Any]]) -> int:
    """Every item is in the store or in the archive, never both, never neither; how many are archived."""
    places = [((root / i["from"]).exists(), (root / i["to"]).exists()) for i in manifest]
    assert all(a != b for a, b in places), places
    return sum(b for _a, b in places)


def test_a_kill_at_every_point_of_a_prune_and_of_its_undo_leaves_each_folder_in_one_place(tmp_path: Path) -> None:
    root = dcp(tmp_path)
    catalog, store = _open(tmp_path, root, "torch-dcp")
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    forget, before = plan.forget_table(catalog), tree(root)
    for step in range(forget.num_rows + 1):  # prune: killed before each move, and before the entry
        entry = _entry("prune")
        _killed_at(root, step, lambda b: b.prune(jr.PruneRequest(entry, forget, plan.archive)))
        backend = DcpRetention(str(root))
        manifest = backend.pending()[0]["entry"]["note"]["manifest"]
        assert _each_in_one_place(root, manifest) == step
        backend.resume()  # the next action: rolled forward when a move took effect, dropped otherwise
        entries = backend.recovery.journal_entries()
        assert backend.pending() == [] and jr.verify_chain(entries).ok
        assert _each_in_one_place(root, manifest) == (len(manifest) if step else 0)
        assert any(e["id"] == entry["id"] for e in entries) == bool(step) and dcp_latest(root, "runA") == "step-30"
        if step:  # undo it, killed at the same point, then rolled forward
            undo = _entry("undo", undo_of=entry["id"], note={"retention": jr.UNPRUNE})
            _killed_at(root, step, lambda b: b.unprune(jr.UnpruneRequest(undo, entries[-1])))
            assert _each_in_one_place(root, manifest) == len(manifest) - step
            backend.resume()
            assert _each_in_one_place(root, manifest) == 0 and tree(root) == before
            assert jr.verify_chain(backend.recovery.journal_entries()).ok


@pytest.mark.s3
def test_on_s3_a_prune_and_its_undo_are_copies_then_deletes(s3_env: dict[str, str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An S3 bucket (moto): each pruned step folder is copied into the archive, then deleted; the undo
    copies it back — every object byte for byte."""
    import uuid

    import fsspec
    import s3fs

    # fsspec read FSSPEC_S3_ENDPOINT_URL when it was imported; in this process set its config directly
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3_env["FSSPEC_S3_ENDPOINT_URL"]})

    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"], key="testing", secret="testing")
    bucket = f"lastgood-{uuid.uuid4().hex[:10]}"
    fs.mkdir(bucket)
    fs.put(str(dcp(tmp_path)), f"{bucket}/dcp", recursive=True)
    url = f"s3://{bucket}/dcp"

    def objects() -> dict[str, str]:
        fs.invalidate_cache()
        return {p[len(bucket) + 5:]: hashlib.sha256(fs.cat_file(p)).hexdigest()
                for p in fs.find(f"{bucket}/dcp") if "/.lastgood/" not in p}
    before = objects()
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    store = index_store(catalog, url, reader_name="torch-dcp", check="none").store
    plan = retention.plan_prune(catalog, store, Policy(last=1))
    assert plan.archive == f"{url}/{ARCHIVE}"
    done = retention.apply_prune(catalog, store, plan, reason="tidy", operator="t")
    assert done.checkpoints == 3 and {k.split("/")[1] for k in objects()} == {"step-30", "step-25"}
    fs.invalidate_cache()
    assert len(fs.find(f"{bucket}/dcp/{ARCHIVE}/{done.action_id}")) == 3 * 2  # .metadata + one .distcp each
    store = index_store(catalog, url, reader_name="torch-dcp", check="none").store
    undo = retention.plan_undo_prune(catalog, store, done.action_id)
    assert undo.conflicts == []
    retention.apply_undo_prune(catalog, store, undo, reason="back", operator="t")
    assert objects() == before
