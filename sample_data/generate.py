"""Make Lastgood's sample store (or a large one for benchmarks), seeded and deterministic.

    python sample_data/generate.py                          # sample_data/agents + manifest.json
    python sample_data/generate.py --out /tmp/big --checkpoints 1000000 --runs 2000 --no-damage

Three agents (trading, support, research) write checkpoints whose state looks
like a real agent's: ``llm`` (messages with tool calls, context window, model
parameters), ``tools`` (connections and an API key that must be redacted),
``memory`` (session variables, small embeddings), ``runtime`` (turn, pending
actions). Runs have periodic, event, manual, final and restore triggers,
incremental chains, failures recorded as events, and — unless --no-damage —
one deliberately damaged snapshot of every kind listed in the manifest.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lastgood.readers.native import format as nf
from lastgood.readers.native.writer import NativeWriter, SaveRequest

EPOCH = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
SAMPLE_API_KEY = "sk-lastgood-sample-9f8e7d6c5b4a39281706"
AGENTS = {
    "trading-agent": {
        "model": "gpt-4.1", "tools": ["get_quote", "place_order", "portfolio"],
        "asks": ["Rebalance toward 60/40", "What is AAPL trading at?", "Cut exposure to energy",
                 "Hedge the NVDA position", "Summarise today's P&L"],
    },
    "support-agent": {
        "model": "claude-sonnet-4", "tools": ["lookup_order", "refund", "search_kb"],
        "asks": ["My order #4411 never arrived", "I was charged twice", "How do I reset my password?",
                 "Cancel my subscription", "The app crashes on login"],
    },
    "research-agent": {
        "model": "gemini-2.5-pro", "tools": ["web_search", "fetch_page", "summarise"],
        "asks": ["Survey checkpointing in agent frameworks", "Compare DuckDB and SQLite for analytics",
                 "Find papers on state-space models", "What changed in Python 3.13?",
                 "Collect benchmarks for vector databases"],
    },
}
DAMAGE_KINDS = ("sha256-mismatch", "truncated-blob", "missing-blob", "undecodable-payload",
                "missing-parent", "broken-patch", "unknown-codec", "unsafe-path", "incomplete-save")


@dataclass
class RunPlan:
    agent: str
    run_id: str
    steps: int
    start: datetime
    crash: bool = False
    restart_at: int | None = None
    damage: dict[int, str] = field(default_factory=dict)


def det_id(rng: random.Random, when: datetime) -> str:
    """A UUIDv7-shaped id from the synthetic time and the seeded generator."""
    ms = int(when.timestamp() * 1000)
    value = (ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62) | rng.getrandbits(62)
    return str(uuid.UUID(int=value))


# ---- agent states ---------------------------------------------------------------

def message_pair(rng: random.Random, agent: str, turn: int) -> list[dict[str, Any]]:
    spec = AGENTS[agent]
    tool = rng.choice(spec["tools"])
    call_id = f"call_{turn:04d}_{rng.getrandbits(24):06x}"
    return [
        {"role": "user", "content": rng.choice(spec["asks"])},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "name": tool, "args": {"query": f"{tool} #{turn}", "limit": rng.randint(1, 9)}}]},
        {"role": "tool", "tool_call_id": call_id, "name": tool,
         "content": json.dumps({"ok": True, "rows": rng.randint(0, 40), "latency_ms": rng.randint(20, 900)})},
        {"role": "assistant", "content": f"Done: {tool} returned results for turn {turn}."},
    ]


def initial_state(rng: random.Random, agent: str, run_id: str) -> dict[str, Any]:
    spec = AGENTS[agent]
    return {
        "llm": {"model": spec["model"], "params": {"temperature": round(rng.uniform(0, 1), 2),
                                                   "max_tokens": 4096, "top_p": 0.95},
                "context_window": {"limit": 128000, "used": 900}, "messages": [
                    {"role": "system", "content": f"You are the {agent}. Be precise and cite tools."}]},
        "tools": {"connections": {t: {"status": "connected", "endpoint": f"https://api.example.com/{t}"}
                                  for t in spec["tools"]},
                  "api_key": SAMPLE_API_KEY, "rate_limit": {"per_minute": 60, "remaining": 60}},
        "memory": {"session": {"run_id": run_id, "user": f"user-{rng.randint(100, 999)}", "locale": "en-GB"},
                   "embeddings": [[round(rng.uniform(-1, 1), 4) for _ in range(8)] for _ in range(3)]},
        "runtime": {"turn": 0, "pending_actions": [], "errors": 0, "status": "running"},
    }


def advance(rng: random.Random, agent: str, state: dict[str, Any], turn: int) -> dict[str, Any]:
    state = json.loads(json.dumps(state))
    messages = state["llm"]["messages"]
    messages.extend(message_pair(rng, agent, turn))
    if len(messages) > 33:  # keep the system prompt plus the last 32 messages, like a context window
        state["llm"]["messages"] = messages[:1] + messages[-32:]
    state["llm"]["context_window"]["used"] = min(128000, 900 + 350 * turn)
    state["tools"]["rate_limit"]["remaining"] = max(0, 60 - turn % 60)
    state["memory"]["session"]["last_topic"] = rng.choice(AGENTS[agent]["asks"])
    if turn % 7 == 0:
        state["memory"]["embeddings"].append([round(rng.uniform(-1, 1), 4) for _ in range(8)])
        state["memory"]["embeddings"] = state["memory"]["embeddings"][-6:]
    state["runtime"]["turn"] = turn
    state["runtime"]["pending_actions"] = [f"{rng.choice(AGENTS[agent]['tools'])}:{turn + 1}"] if turn % 3 else []
    return state


# ---- plans --------------------------------------------------------------------

def plan_runs(rng: random.Random, runs_per_agent: int, steps: int) -> list[RunPlan]:
    plans = []
    for a, agent in enumerate(AGENTS):
        for r in range(runs_per_agent):
            start = EPOCH + timedelta(hours=6 * r + 2 * a, minutes=rng.randint(0, 50))
            n = steps + rng.randint(-steps // 4, steps // 4)
            plans.append(RunPlan(agent, f"{agent.split('-')[0]}-{r + 1:03d}", n, start))
    plans[1].crash = True
    plans[4].restart_at = plans[4].steps // 2
    plans[7].crash = True
    return plans


def plan_damage(plans: list[RunPlan]) -> None:
    """One damaged snapshot of each kind, spread over different runs, mid-run."""
    for kind, plan in zip(DAMAGE_KINDS, plans[2:] + plans[:2]):
        if kind == "incomplete-save":
            plan.crash = True
            plan.damage[plan.steps] = kind  # the save after the last one never commits
        else:
            plan.damage[plan.steps // 3 + len(plan.damage) * 5] = kind


def trigger_for(rng: random.Random, plan: RunPlan, i: int, last: int) -> tuple[str, dict[str, Any] | None]:
    if i == last and not plan.crash:
        return "final", None
    if plan.restart_at is not None and i == plan.restart_at:
        return "restore", {"kind": "restart", "message": "worker restarted after OOM kill; resumed from last good checkpoint"}
    roll = rng.random()
    if roll < 0.05:
        return "event", {"kind": "timeout", "message": f"tool call timed out after {rng.choice([30, 60, 120])} s"}
    if roll < 0.07:
        return "event", {"kind": "error", "message": "rate limited (HTTP 429); backing off"}
    if roll < 0.10:
        return "manual", None
    return "periodic", None


def requests_for(rng: random.Random, plan: RunPlan) -> list[SaveRequest]:
    state = initial_state(rng, plan.agent, plan.run_id)
    when = plan.start
    out = []
    last = plan.steps - 1
    for i in range(plan.steps):
        state = advance(rng, plan.agent, state, i)
        when += timedelta(seconds=rng.randint(20, 140))
        trigger, event = trigger_for(rng, plan, i, last)
        if plan.crash and i == last:
            event = {"kind": "crash", "message": "process exited with signal 9 (SIGKILL) mid-turn"}
        force_full = (i - 1) in plan.damage or trigger in ("final", "restore")
        kind = "full" if force_full else None
        if plan.damage.get(i) == "missing-parent":
            kind = "incremental"
        meta = {"turn": i, "host": f"worker-{rng.randint(1, 4)}"}
        if trigger == "restore":
            meta["restored_from_step"] = max(0, i - 5)
        out.append(SaveRequest(plan.run_id, state, trigger, kind=kind,
                               metadata=meta, agent=plan.agent, step=i, created_at=when, event=event,
                               checkpoint_id=det_id(rng, when)))
    return out


# ---- writing ------------------------------------------------------------------

def write_sample(out: Path, seed: int, runs_per_agent: int, steps: int, damage: bool) -> dict[str, Any]:
    rng = random.Random(seed)
    plans = plan_runs(rng, runs_per_agent, steps)
    if damage:
        plan_damage(plans)
    writer = NativeWriter(str(out), full_every=8)
    requests = {plan.run_id: requests_for(rng, plan) for plan in plans}
    cut = {run: int(len(reqs) * 0.85) for run, reqs in requests.items()}
    saved = {run: writer.save_many(reqs[: cut[run]]) for run, reqs in requests.items()}
    damaged = [apply_damage(out, writer, rng, plan, saved[plan.run_id], step, kind)
               for plan in plans for step, kind in sorted(plan.damage.items())
               if kind != "incomplete-save"] if damage else []
    writer.compact()  # older history in a Parquet part; what follows stays in the tail
    for run, reqs in requests.items():
        saved[run] += writer.save_many(reqs[cut[run]:])
    damaged += [incomplete_save(out, rng, plan, saved[plan.run_id][-1])
                for plan in plans if "incomplete-save" in plan.damage.values()] if damage else []
    line = add_malformed_line(out, rng) if damage else None
    if damage:
        damaged += damaged_head(out, plans, saved, damaged)
    return manifest(out, plans, saved, damaged, line)


def damaged_head(out: Path, plans: list[RunPlan], saved: dict[str, list[Any]],
                 damaged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run whose two newest checkpoints are damaged (truncated blobs): its last good checkpoint is
    not its head, so "restore last good" has something to do (the first undamaged run of the last agent)."""
    hit = {d["run_id"] for d in damaged}
    plan = next(p for p in reversed(plans) if p.run_id not in hit and not p.crash and not p.restart_at)
    out_entries = []
    for target in saved[plan.run_id][-2:]:
        blob = out / target.location
        blob.write_bytes(blob.read_bytes()[: target.size_bytes // 2])
        out_entries.append({"checkpoint_id": target.checkpoint_id, "run_id": plan.run_id,
                            "damage": "damaged-head", "expected_status": "corrupt",
                            "expected_check": "size-mismatch"})
    return out_entries


def write_large(out: Path, seed: int, runs: int, checkpoints: int, batch: int = 20_000) -> dict[str, Any]:
    """A big, undamaged store with small states (benchmarks): bulk saves, then one compaction."""
    rng = random.Random(seed)
    writer = NativeWriter(str(out), full_every=10)
    per_run = max(1, checkpoints // runs)
    agents = list(AGENTS)
    pending: list[SaveRequest] = []
    for n in range(checkpoints):
        run, step = divmod(n, per_run)
        when = EPOCH + timedelta(seconds=n * 3 + rng.randint(0, 2))
        state = {"step": step, "loss": round(2.5 / (1 + step) + rng.random() * 0.01, 5),
                 "messages": [f"turn {i}" for i in range(max(0, step - 3), step + 1)],
                 "tools": {"api_key": SAMPLE_API_KEY}}
        pending.append(SaveRequest(f"run-{run:06d}", state, "periodic" if step % 50 else "manual",
                                   agent=agents[run % len(agents)], step=step, created_at=when,
                                   checkpoint_id=det_id(rng, when)))
        if len(pending) >= batch:
            writer.save_many(pending)
            pending = []
    writer.save_many(pending)
    writer.compact()
    return {"store": out.name, "runs": -(-checkpoints // per_run), "checkpoints": checkpoints,
            "damaged": [], "catalog_findings": [], "removed_entries": []}


def apply_damage(out: Path, writer: NativeWriter, rng: random.Random, plan: RunPlan,
                 saved: list[Any], step: int, kind: str) -> dict[str, Any]:
    target = saved[step]
    blob = out / target.location
    expected = {"checkpoint_id": target.checkpoint_id, "run_id": plan.run_id, "damage": kind,
                "expected_status": "corrupt"}
    if kind == "sha256-mismatch":
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0x20
        blob.write_bytes(bytes(data))
        return expected | {"expected_check": "sha256-mismatch"}
    if kind == "truncated-blob":
        blob.write_bytes(blob.read_bytes()[: target.size_bytes // 2])
        return expected | {"expected_check": "size-mismatch"}
    if kind == "missing-blob":
        blob.unlink()
        return expected | {"expected_check": "blob-missing"}
    if kind == "undecodable-payload":
        return rewrite_payload(out, target, b"\x00\xffnot json at all\x13", expected, "undecodable")
    if kind == "broken-patch":
        return broken_patch(out, writer, saved, step, expected)
    if kind == "unknown-codec":
        patch_entry(out, target.checkpoint_id, codec="zstd-v9")
        return expected | {"expected_check": "unknown-codec"}
    if kind == "unsafe-path":
        patch_entry(out, target.checkpoint_id, location="../../../etc/passwd")
        return expected | {"expected_check": "unsafe-path"}
    if kind == "missing-parent":
        parent = saved[step - 1]
        remove_entry(out, parent.checkpoint_id)
        return expected | {"expected_check": "parent-missing", "removed_parent": parent.checkpoint_id}
    raise ValueError(kind)


def rewrite_payload(out: Path, target: Any, payload: bytes, expected: dict[str, Any],
                    check: str) -> dict[str, Any]:
    (out / target.location).write_bytes(payload)
    patch_entry(out, target.checkpoint_id, size_bytes=len(payload), checksum=nf.sha256_text(payload))
    return expected | {"expected_check": check}


def broken_patch(out: Path, writer: NativeWriter, saved: list[Any], step: int,
                 expected: dict[str, Any]) -> dict[str, Any]:
    target = saved[step]
    parent = saved[step - 1]
    ref = {"checkpoint_id": parent.checkpoint_id, "location": parent.location, "codec": "json",
           "checksum": parent.checksum, "kind": parent.kind}
    ops = [{"op": "remove", "path": "/llm/not_there"}, {"op": "replace", "path": "/runtime/turn", "value": -1}]
    payload = nf.encode_payload(nf.patch_envelope(ref, ops), "json")
    patch_entry(out, target.checkpoint_id, kind="incremental", parent_id=parent.checkpoint_id)
    return rewrite_payload(out, target, payload, expected, "chain-broken")


def incomplete_save(out: Path, rng: random.Random, plan: RunPlan, last: Any) -> dict[str, Any]:
    when = last.created_at + timedelta(seconds=45)
    cid = det_id(rng, when)
    location = nf.blob_location(plan.run_id, cid, "json")
    marker = {"run_id": plan.run_id, "namespace": "", "checkpoint_id": cid, "parent_id": last.checkpoint_id,
              "step": last.step + 1, "trigger": "periodic", "kind": "full", "agent": plan.agent,
              "codec": "json", "location": location, "started_at": nf.iso(when)}
    pending = out / nf.PENDING / f"{cid}.json"
    pending.parent.mkdir(parents=True, exist_ok=True)
    pending.write_text(json.dumps(marker))
    partial = out / location
    partial.parent.mkdir(parents=True, exist_ok=True)
    (partial.parent / f".tmp-{cid}.json").write_bytes(b'{"llm": {"model": "gpt-4.1", "messages": [{"ro')
    return {"checkpoint_id": cid, "run_id": plan.run_id, "damage": "incomplete-save",
            "expected_status": "incomplete", "expected_check": "incomplete"}


def _tail_files(out: Path) -> list[Path]:
    return sorted((out / nf.TAIL).glob("*.jsonl"))


def _parts_to_tail(out: Path) -> None:
    """Move compacted entries back into an editable tail file (the generator edits the catalog)."""
    import pyarrow.parquet as pq

    for part in sorted((out / nf.PARTS).glob("*.parquet")):
        rows = pq.read_table(part).to_pylist()
        (out / nf.TAIL).mkdir(parents=True, exist_ok=True)
        (out / nf.TAIL / f"{part.stem}.jsonl").write_bytes(b"".join(nf.entry_line(r) for r in rows))
        part.unlink()


def _edit_entries(out: Path, checkpoint_id: str, change: Any) -> None:
    _parts_to_tail(out)
    for path in _tail_files(out):
        lines = path.read_bytes().splitlines(keepends=True)
        edited = []
        for line in lines:
            entry = json.loads(line)
            if entry.get("checkpoint_id") == checkpoint_id:
                entry = change(entry)
                if entry is None:
                    continue
                line = json.dumps(entry, separators=(",", ":")).encode() + b"\n"
            edited.append(line)
        path.write_bytes(b"".join(edited))


def patch_entry(out: Path, checkpoint_id: str, **changes: Any) -> None:
    _edit_entries(out, checkpoint_id, lambda e: {**e, **changes})


def remove_entry(out: Path, checkpoint_id: str) -> None:
    _edit_entries(out, checkpoint_id, lambda e: None)


def add_malformed_line(out: Path, rng: random.Random) -> dict[str, Any]:
    path = out / nf.TAIL / "zz-hand-edited-1.jsonl"
    path.write_bytes(b'{"run_id": "support-002", "checkpoint_id": "oops", "location": \n')
    return {"file": f"{nf.TAIL}/{path.name}", "line": 1, "damage": "malformed-catalog-line",
            "expected_check": "catalog-line"}


def manifest(out: Path, plans: list[RunPlan], saved: dict[str, list[Any]], damaged: list[dict[str, Any]],
             line: dict[str, Any] | None) -> dict[str, Any]:
    removed = {d["removed_parent"] for d in damaged if "removed_parent" in d}
    listed = sum(len(v) for v in saved.values()) - len(removed)
    incomplete = sum(1 for d in damaged if d["damage"] == "incomplete-save")
    return {
        "store": out.name, "api_key": SAMPLE_API_KEY,
        "agents": sorted(AGENTS), "runs": len(plans),
        "checkpoints": listed + incomplete,
        "damaged": damaged,
        "catalog_findings": [line] if line else [],
        "removed_entries": sorted(removed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).with_name("agents")))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=15, help="runs in all (spread over the 3 agents)")
    parser.add_argument("--checkpoints", type=int, default=2400, help="checkpoints in all (about)")
    parser.add_argument("--no-damage", action="store_true")
    parser.add_argument("--manifest", default=None, help="where to write the manifest JSON")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    per_agent = max(1, args.runs // len(AGENTS))
    steps = max(8, args.checkpoints // (per_agent * len(AGENTS)))
    if args.checkpoints > 50_000:
        result = write_large(out, args.seed, args.runs, args.checkpoints)
    else:
        result = write_sample(out, args.seed, per_agent, steps, damage=not args.no_damage)
    target = Path(args.manifest) if args.manifest else (out.parent / "manifest.json" if not args.no_damage else None)
    if target:
        target.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {result['checkpoints']} checkpoints in {result['runs']} runs to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
