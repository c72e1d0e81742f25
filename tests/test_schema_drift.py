"""Schema drift: what is abnormal for a state's shape along a run, never how a state grows.

The rule (lastgood.integrity.content.drift_findings): each checkpoint is compared with its parent
(the checkpoint before it when the format records no parents); a key that disappears, changes type,
or reappears after the lineage had lost it is drift; a key that appears for the first time is not.
"""

from __future__ import annotations

import json
from pathlib import Path

from lastgood.checks import Check
from lastgood.integrity.content import drift_findings, state_shape
from lastgood.readers.base import CheckpointRecord
from tests.helpers import lastgood_cli

ROOT = Path(__file__).resolve().parents[1]


def _drift(states: list[dict], parents: list[int | None] | None = None) -> dict[str, str]:
    """{checkpoint id: message} for states saved in order (``parents``: index of each one's parent)."""
    ids = [f"c{i}" for i in range(len(states))]
    records = [CheckpointRecord(run_id="r", checkpoint_id=cid, step=i,
                                parent_id=None if parents is None or parents[i] is None else ids[parents[i]])
               for i, cid in enumerate(ids)]
    shapes = {cid: state_shape(state) for cid, state in zip(ids, states)}
    return {f.checkpoint_id: f.message for f in drift_findings(records, shapes)}


def test_a_key_appearing_for_the_first_time_is_not_drift() -> None:
    states = [{"messages": []}, {"messages": [], "tools": {"last_tool": "x"}}, {"messages": [], "tools": {
        "last_tool": "y"}, "summary": "done"}]
    assert _drift(states) == {}
    assert _drift(states, parents=[None, 0, 1]) == {}


def test_disappearing_changing_type_and_reappearing_are_drift() -> None:
    states = [{"a": 1, "b": "x"}, {"a": 1}, {"a": "one", "b": "x"}, {"a": 2, "b": None}]
    found = _drift(states)
    assert set(found) == {"c1", "c2", "c3"}
    assert "disappeared: /b" in found["c1"]
    assert "changed type: /a number→string" in found["c2"] and "reappeared: /b" in found["c2"]
    assert "changed type: /a string→number" in found["c3"]
    assert "/b" not in found["c3"]  # set to None: unset, not gone


def test_a_fork_is_compared_with_its_own_parent_not_the_branch_listed_before_it() -> None:
    # c0 → c1 (gains /summary) ; c0 → c2 (a fork from c0: no summary yet) → c3 (gains /summary)
    states = [{"m": []}, {"m": [], "summary": "s"}, {"m": []}, {"m": [], "summary": "t"}]
    assert _drift(states, parents=[None, 0, 0, 2]) == {}
    # listed in step order without parents, the fork looks like a disappearance and a reappearance
    assert set(_drift(states)) == {"c2", "c3"}


def test_a_key_lost_on_one_branch_is_drift_only_on_that_branch() -> None:
    states = [{"m": [], "k": 1}, {"m": []}, {"m": [], "k": 2}, {"m": [], "k": 3}]
    found = _drift(states, parents=[None, 0, 1, 0])  # c2 gets k back after c1 lost it; c3 forks from c0
    assert set(found) == {"c1", "c2"} and "reappeared: /k" in found["c2"]


def test_sample_langgraph_store_has_no_drift_noise(tmp_path: Path) -> None:
    """The LangGraph sample: channels written by their first node (``/tools/last_tool``, ``/summary``)
    and forked threads used to give 30 drift warnings; none of them is abnormal."""
    done = lastgood_cli("verify", str(ROOT / "sample_data" / "langgraph.sqlite"), "--read-data", "--format",
                        "json", home=tmp_path / "home")
    found = json.loads(done.stdout)["findings"]
    assert [f for f in found if f["check"] == Check.SCHEMA_DRIFT] == []
    warnings = [f["check"] for f in found if f["severity"] == "warning"]
    assert warnings == [Check.PENDING_ERROR]  # the one real warning: a task that failed
