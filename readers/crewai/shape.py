"""What a CrewAI flow's shape is, learnt from the rows alone, and the events it gives.

The database holds no flow class, no route, no error and no end marker: a failed kickoff and a
paused one look alike, and nothing says which method is the flow's last. So the shape is learnt
from every run of the store:

- a **start** method is one some run begins with;
- a row whose method is a start method but that is not its run's first row is a **restart**: a
  new ``kickoff(inputs={"id": …})`` re-ran the flow from ``@start`` on the saved state (repeated
  method names after it are normal); a row after one Lastgood appended is **resumed**;
- method A is **followed** when some run has A immediately followed by a method that is not a
  restart; a **final** method is one never followed;
- a run **ended early** at a row whose method is not final and that is its run's last row, or
  that a restart or a restore follows (an attempt that stopped), unless the row is paused for
  human feedback (a ``pending_feedback`` row: an ``interrupt``).

Limits, said plainly: with one run, or when every run of a flow stopped at the same method,
that method looks final (a failure is not seen); a flow whose router loops back to its
``@start`` method reads as restarts; the default database holds every flow class of a user, and
two classes sharing a method name share what is learnt about it. Rows Lastgood appends
(``method_name`` ``lastgood:<action>``) are not methods: they never start, follow or end a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MARK = "lastgood:"  # method_name prefix of the rows Lastgood's recovery appends
FIRST, STEP, RESTART, RESUMED, RESTORE = "first", "step", "restart", "resumed", "restore"
MAX_NAMED_FINALS = 5


def is_mark(method: str) -> bool:
    return method.startswith(MARK)


@dataclass
class FlowShape:
    """Starts, methods and followed methods seen over the store's runs."""

    starts: set[str] = field(default_factory=set)
    methods: set[str] = field(default_factory=set)
    followed: set[str] = field(default_factory=set)

    @property
    def finals(self) -> frozenset[str]:
        return frozenset(self.methods - self.followed)

    def to_json(self) -> dict[str, list[str]]:
        return {"starts": sorted(self.starts), "methods": sorted(self.methods),
                "followed": sorted(self.followed)}

    @classmethod
    def from_json(cls, value: Any) -> FlowShape | None:
        if not isinstance(value, Mapping):
            return None
        parts = [value.get(k) for k in ("starts", "methods", "followed")]
        if not all(isinstance(p, list) and all(isinstance(x, str) for x in p) for p in parts):
            return None
        return cls(set(parts[0]), set(parts[1]), set(parts[2]))

    def copy(self) -> FlowShape:
        return FlowShape(set(self.starts), set(self.methods), set(self.followed))


def kind_of(method: str, previous: str | None, starts: set[str]) -> str:
    """How a row came to be, from its method and the method of the run's row before it (None:
    the first): first, step, restart, resumed (after a Lastgood row), restore (a Lastgood row)."""
    if method.startswith(MARK):
        return RESTORE
    if previous is None:
        return FIRST
    if previous.startswith(MARK):
        return RESUMED
    return RESTART if method in starts else STEP


def stopped_here(method: str, next_kind: str | None, finals: frozenset[str], paused: bool) -> bool:
    """A row where an attempt ended before a final method (see the module docstring)."""
    if is_mark(method) or paused or method in finals:
        return False
    return next_kind in (None, RESTART, RESTORE)


def finals_text(finals: Iterable[str]) -> str:
    names = sorted(finals)
    if not names:
        return "no method of this store looks final"
    shown = ", ".join(names[:MAX_NAMED_FINALS]) + (", …" if len(names) > MAX_NAMED_FINALS else "")
    return f"final methods seen in this store: {shown}"


@dataclass(frozen=True, slots=True)
class Pending:
    """A ``pending_feedback`` row: the flow waits for a human at ``method``."""

    flow_uuid: str
    method: str | None
    message: str | None
    row_id: int


def pending_text(pending: Pending) -> str:
    where = f" at {pending.method}" if pending.method else ""
    question = f": {pending.message}" if pending.message else ""
    return f"waiting for human feedback{where}{question}"
