"""Write a folder of pydantic-graph ``FileStatePersistence`` run files.

    .venv-fixtures/pydantic_graph/bin/python sample_data/generators/pydantic_graph/generate.py \
        --out sample_data/pydantic_graph

Every file is written by pydantic-graph itself: ``triage_graph`` (see
``graph_def.py``: Classify -> LookupAccount -> DraftReply <-> Review -> End)
is run with one ``FileStatePersistence(Path(out) / f"{run_id}.json")`` per
run. No LLM: nodes are plain Python.

Runs (file = ``<run_id>.json``):

* ``run_5c1e2a7f`` completed: 4 node snapshots + 1 end snapshot (no loop).
* ``run_9b04d3e6`` completed through the Review -> DraftReply loop
  (priority-2 ticket): 6 node snapshots + end.
* ``run_2f8a61c0`` error: ``LookupAccount`` raises ``CrmUnavailable``; its
  snapshot is left with ``status: "error"`` and the run has no end snapshot.
* ``run_d7e3b918`` interrupted then resumed: iterated with ``graph.iter``
  for two nodes, then abandoned (its next snapshot stays ``"created"``);
  later resumed in a fresh ``FileStatePersistence`` with
  ``graph.iter_from_persistence`` and driven to End.
* ``run_64af0c25`` interrupted, never resumed: the last snapshot is a
  ``"created"`` node -- what ``iter_from_persistence`` would start at.

The state (``TicketState``) carries a secret-shaped ``crm_api_key``
(``sk-proj-...``).

Determinism: pydantic-graph reads the wall clock through
``pydantic_graph.persistence._utils.datetime`` (``start_ts``, end ``ts``),
durations through ``pydantic_graph.persistence.file.perf_counter``, and makes
snapshot ids with ``pydantic_graph.basenode.generate_snapshot_id`` ("module
method to allow mocking"). This script points those three names at a
simulated clock (2026-11-03 16:00 UTC on; nodes advance it by their simulated
work) and a seeded id generator. ``--real-clock`` keeps the real clock and
random ids.

The folder is built beside ``--out`` and renamed into place; no
``.pydantic-graph-persistence-lock`` file is left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import uuid
import warnings
from datetime import datetime
from pathlib import Path

# pydantic-graph 1.x warns (PydanticGraphDeprecationWarning) that the
# BaseNode Graph runner and its persistence are removed in v2.
warnings.simplefilter("ignore")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pydantic_graph.basenode as pg_basenode  # noqa: E402
import pydantic_graph.persistence._utils as pg_persist_utils  # noqa: E402
import pydantic_graph.persistence.file as pg_file  # noqa: E402
from pydantic_graph import End  # noqa: E402
from pydantic_graph.persistence.file import FileStatePersistence  # noqa: E402

from graph_def import CRM_DOWN, SIM, Classify, CrmUnavailable, TicketState, triage_graph  # noqa: E402

SECRET_API_KEY = "sk-proj-Hx2Wn7Rb5Kc9Vt1Pd4Ls8Gq3Zm6Yj0Ae"
_IDS = random.Random(2026110303)


class _SimDatetime(datetime):
    @classmethod
    def now(cls, tz=None):
        t = SIM.now()
        return t if tz is not None else t.replace(tzinfo=None)


def _seeded_snapshot_id(node_id: str) -> str:
    return f"{node_id}:{uuid.UUID(int=_IDS.getrandbits(128), version=4).hex}"


def install_sim_clock() -> None:
    pg_persist_utils.datetime = _SimDatetime
    pg_file.perf_counter = SIM.perf
    pg_basenode.generate_snapshot_id = _seeded_snapshot_id


def state(ticket: str, customer: str, *messages: str) -> TicketState:
    return TicketState(ticket_id=ticket, customer=customer, messages=list(messages),
                       crm_api_key=SECRET_API_KEY)


async def run_to_end(path: Path, st: TicketState) -> str:
    persistence = FileStatePersistence(path)
    result = await triage_graph.run(Classify(), state=st, persistence=persistence)
    return result.output


async def build(folder: Path) -> dict:
    runs = []

    # 1. straight through
    SIM.advance(60)
    out = await run_to_end(folder / "run_5c1e2a7f.json",
                           state("T-1001", "alice@example.com", "My invoice shows the wrong VAT number."))
    runs.append({"run_id": "run_5c1e2a7f", "kind": "completed", "output": out})

    # 2. through the Review -> DraftReply loop
    SIM.advance(840)
    out = await run_to_end(folder / "run_9b04d3e6.json",
                           state("T-1002", "bob@example.com", "URGENT: the API returns 500 since this morning."))
    runs.append({"run_id": "run_9b04d3e6", "kind": "completed (loop)", "output": out})

    # 3. a node raises -> status "error"
    SIM.advance(840)
    CRM_DOWN.add("acct-carol")
    try:
        await run_to_end(folder / "run_2f8a61c0.json",
                         state("T-1003", "carol@example.com", "Please refund my last payment."))
    except CrmUnavailable as exc:
        print(f"  (expected) {type(exc).__name__}: {exc}", file=sys.stderr)
    else:
        raise AssertionError("expected CrmUnavailable")
    CRM_DOWN.discard("acct-carol")
    runs.append({"run_id": "run_2f8a61c0", "kind": "error", "failed_node": "LookupAccount"})

    # 4. interrupted after two nodes, resumed later with iter_from_persistence
    SIM.advance(840)
    path = folder / "run_d7e3b918.json"
    p1 = FileStatePersistence(path)
    async with triage_graph.iter(Classify(), state=state(
            "T-1004", "dave@example.com", "URGENT refund: charged twice for invoice 88."),
            persistence=p1) as run:
        steps = 0
        async for node in run:  # yields the start node first, then each next node
            if isinstance(node, End):
                break
            steps += 1
            if steps > 2:  # Classify and LookupAccount have run; stop before DraftReply
                break
    SIM.advance(1800)  # the worker died; an operator resumes half an hour later
    p2 = FileStatePersistence(path)  # a fresh process only has the file
    async with triage_graph.iter_from_persistence(p2) as run:
        resumed_at = type(run.next_node).__name__
        async for node in run:
            if isinstance(node, End):
                break
    runs.append({"run_id": "run_d7e3b918", "kind": "interrupted then resumed",
                 "resumed_at": resumed_at, "output": run.result.output})

    # 5. interrupted, never resumed
    SIM.advance(840)
    p = FileStatePersistence(folder / "run_64af0c25.json")
    async with triage_graph.iter(Classify(), state=state(
            "T-1005", "erin@example.com", "How do I rotate my API token?"), persistence=p) as run:
        steps = 0
        async for node in run:
            steps += 1
            if steps > 3:  # Classify, LookupAccount, DraftReply have run; Review is pending
                break
    runs.append({"run_id": "run_64af0c25", "kind": "interrupted (resumable)",
                 "next_node": type(run.next_node).__name__})
    return {"pydantic_graph_version": _version(), "runs": runs}


def _version() -> str:
    from importlib.metadata import version
    return version("pydantic-graph")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder to write the run files into (replaced)")
    ap.add_argument("--real-clock", action="store_true", help="real timestamps/durations and random ids")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if not args.real_clock:
        install_sim_clock()
    out = Path(args.out).resolve()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    summary = asyncio.run(build(tmp))
    leftovers = [p.name for p in tmp.iterdir() if not p.name.endswith(".json")]
    assert not leftovers, leftovers
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
