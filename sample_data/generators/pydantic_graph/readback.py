"""Print, as JSON, what pydantic-graph would resume each run from.

    .venv-fixtures/pydantic_graph/bin/python sample_data/generators/pydantic_graph/readback.py \
        sample_data/pydantic_graph RUN_ID [RUN_ID ...]
    .venv-fixtures/pydantic_graph/bin/python sample_data/generators/pydantic_graph/readback.py \
        sample_data/pydantic_graph --all

STORE is the folder of run files; RUN_ID is a file's stem (``run_d7e3b918``)
or a path to a ``.json`` file. Everything is read with pydantic-graph's own
API, on ``triage_graph`` from ``graph_def.py`` (the file can only be decoded
with the graph's node classes and state type):

* ``FileStatePersistence(path).set_graph_types(graph)`` then ``load_all()``:
  the full snapshot history, decoded into ``NodeSnapshot``/``EndSnapshot``
  objects (printed field by field from their public attributes);
* ``graph.iter_from_persistence(persistence)``: entered but not iterated --
  its ``GraphRun.next_node`` and ``GraphRun.state`` are exactly the node and
  state a resume would run next. It raises ``GraphRuntimeError`` when no
  snapshot has status ``"created"`` (a finished or failed run): printed as
  ``"resume": null`` with the reason.

``iter_from_persistence`` goes through ``load_next()``, which *writes* the
file (the chosen snapshot's status becomes ``"pending"``). So each run file is
copied into a temporary directory first and the API runs on the copy; the
store is never written.

Output: ``{"store", "pydantic_graph_version", "runs": [{"run_id", "file",
"found", "snapshot_count", "status", "snapshots": [...], "end": null |
{...}, "resume": null | {"snapshot_id", "node_id", "node", "state"},
"resume_error"}]}``. ``status`` is derived: ``"ended"`` (last snapshot is an
end snapshot), ``"error"`` (a node snapshot has status error), ``"resumable"``
(``iter_from_persistence`` found a created snapshot), else the last node
snapshot's status. A missing run gets ``"found": false`` and exit status 1.
"""

from __future__ import annotations

import warnings

warnings.simplefilter("ignore")  # PydanticGraphDeprecationWarning (1.x API)

import argparse  # noqa: E402
import asyncio  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from datetime import datetime  # noqa: E402
from importlib.metadata import version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pydantic_graph import End  # noqa: E402
from pydantic_graph.exceptions import GraphRuntimeError  # noqa: E402
from pydantic_graph.persistence import EndSnapshot, NodeSnapshot  # noqa: E402
from pydantic_graph.persistence.file import FileStatePersistence  # noqa: E402

from graph_def import triage_graph  # noqa: E402


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _node(node: Any) -> dict[str, Any]:
    if isinstance(node, End):
        return {"data": _plain(node.data)}
    out = _plain(node)
    out["node_id"] = node.get_node_id()
    return out


def _snapshot(s: Any) -> dict[str, Any]:
    if isinstance(s, EndSnapshot):
        return {"kind": s.kind, "id": s.id, "ts": _plain(s.ts), "state": _plain(s.state),
                "result": _node(s.result)}
    assert isinstance(s, NodeSnapshot)
    return {"kind": s.kind, "id": s.id, "status": s.status, "start_ts": _plain(s.start_ts),
            "duration": s.duration, "state": _plain(s.state), "node": _node(s.node)}


async def _read_run(src: Path, work: Path) -> dict[str, Any]:
    item: dict[str, Any] = {"run_id": src.stem, "file": str(src), "found": src.is_file()}
    if not item["found"]:
        return item
    copy = work / src.name
    shutil.copy2(src, copy)

    persistence = FileStatePersistence(copy)
    persistence.set_graph_types(triage_graph)
    snapshots = await persistence.load_all()
    item["snapshot_count"] = len(snapshots)
    item["snapshots"] = [_snapshot(s) for s in snapshots]
    ends = [s for s in snapshots if isinstance(s, EndSnapshot)]
    item["end"] = _snapshot(ends[-1]) if ends else None

    resume_p = FileStatePersistence(copy)  # a fresh object, as a new process would make
    item["resume"] = None
    item["resume_error"] = None
    try:
        async with triage_graph.iter_from_persistence(resume_p) as run:
            nxt = run.next_node
            item["resume"] = {
                "snapshot_id": nxt.get_snapshot_id(),
                "node_id": nxt.get_node_id(),
                "node": _node(nxt),
                "state": _plain(run.state),
            }
    except GraphRuntimeError as exc:
        item["resume_error"] = f"{type(exc).__name__}: {exc}"

    if snapshots and isinstance(snapshots[-1], EndSnapshot):
        status = "ended"
    elif any(isinstance(s, NodeSnapshot) and s.status == "error" for s in snapshots):
        status = "error"
    elif item["resume"] is not None:
        status = "resumable"
    elif snapshots:
        status = snapshots[-1].status
    else:
        status = "empty"
    item["status"] = status
    return item


async def _main(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    store = Path(args.store).resolve()
    if not store.exists():
        raise SystemExit(f"no such store: {store}")
    targets: list[Path] = []
    for rid in args.run_ids:
        p = Path(rid)
        if p.suffix == ".json" and (p.is_file() or p.is_absolute()):
            targets.append(p.resolve())
        else:
            targets.append(store / f"{rid}.json")
    if args.all:
        targets += sorted(p for p in store.glob("*.json") if p not in targets)
    work = Path(tempfile.mkdtemp(prefix="pg-readback-"))
    rc = 0
    try:
        runs = []
        for t in dict.fromkeys(targets):
            item = await _read_run(t, work)
            if not item["found"]:
                rc = 1
            runs.append(item)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"store": str(store), "pydantic_graph_version": version("pydantic-graph"), "runs": runs}, rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Read pydantic-graph FileStatePersistence runs back.")
    ap.add_argument("store", help="folder of <run_id>.json files")
    ap.add_argument("run_ids", nargs="*", help="run id(s) (file stem) or .json path(s)")
    ap.add_argument("--all", action="store_true", help="every *.json in the folder")
    ap.add_argument("--no-snapshots", action="store_true", help="omit the full snapshot list")
    args = ap.parse_args(argv)
    if not args.run_ids and not args.all:
        ap.error("give at least one RUN_ID, or --all")
    result, rc = asyncio.run(_main(args))
    if args.no_snapshots:
        for r in result["runs"]:
            r.pop("snapshots", None)
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
