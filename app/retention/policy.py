"""Retention policies with restic's option names and meaning (``restic forget``).

Per run (a run and namespace: a LangGraph thread's namespace is its own group), checkpoints are
sorted newest first and each rule keeps some; a checkpoint any rule keeps stays:

- ``--keep-last N``: the N newest;
- ``--keep-hourly/--keep-daily/--keep-weekly/--keep-monthly/--keep-yearly N``: the newest checkpoint of
  each of the N most recent hours/days/ISO weeks/months/years that have one (UTC); when a run has
  fewer such buckets than N, its oldest checkpoint is kept too (restic ≥ 0.17: "oldest daily");
- ``--keep-within DURATION``: every checkpoint newer than DURATION before the run's newest one (the
  newest not in the future), not before now;
- ``--keep-runs-within DURATION`` (Lastgood's): a run whose newest checkpoint is older than DURATION
  before now goes whole — head and last good included — unless something in it is pinned or named by
  a journaled action (then the other rules apply to it). Without per-checkpoint rules, the other runs
  are kept whole.

A count is a number or ``unlimited`` (-1). A DURATION is restic's: numbers with units ``y`` (years),
``m`` (months), ``d`` (days), ``h`` (hours), e.g. ``2d``, ``1y2m``, ``36h`` — ``m`` is months, as in
restic. Going back by a duration works like Go's ``AddDate`` (months that overflow roll over: March 31
minus a month is March 3), then subtracts the hours.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from lastgood.errors import UsageError

UNLIMITED = -1
COUNT_RULES = ("last", "hourly", "daily", "weekly", "monthly", "yearly")
DURATION_RULES = ("within", "runs_within")
OPTIONS = {name: f"--keep-{name.replace('_', '-')}" for name in (*COUNT_RULES, *DURATION_RULES)}
_UNIT = re.compile(r"(-?\d+)([ymdh])")


@dataclass(frozen=True, slots=True)
class Duration:
    """restic's duration: years, months, days, hours."""

    years: int = 0
    months: int = 0
    days: int = 0
    hours: int = 0

    @classmethod
    def parse(cls, text: str) -> Duration:
        """``6y5m234d37h``-style text, like restic's ParseDuration (a unit given twice: the last wins)."""
        value = str(text).strip()
        if not value:
            raise UsageError("an empty duration: give e.g. 2d, 36h, 1y2m (y years, m months, d days, h hours)")
        parts: dict[str, int] = {}
        pos = 0
        for match in _UNIT.finditer(value):
            if match.start() != pos:
                break
            parts[match.group(2)] = int(match.group(1))
            pos = match.end()
        if pos != len(value):
            raise UsageError(f"invalid duration {text!r}: use numbers with units y (years), m (months), d (days), "
                             "h (hours), e.g. 2d, 36h, 1y2m")
        return cls(parts.get("y", 0), parts.get("m", 0), parts.get("d", 0), parts.get("h", 0))

    def __str__(self) -> str:
        text = "".join(f"{n}{u}" for n, u in ((self.years, "y"), (self.months, "m"), (self.days, "d"),
                                               (self.hours, "h")) if n)
        return text or "0h"

    @property
    def zero(self) -> bool:
        return not (self.years or self.months or self.days or self.hours)

    def before(self, moment: datetime) -> datetime | None:
        """``moment`` minus this duration (Go's AddDate, then hours); None before year 1."""
        return add_date(moment, -self.years, -self.months, -self.days, -self.hours)


def add_date(moment: datetime, years: int, months: int, days: int, hours: int = 0) -> datetime | None:
    """Go's ``t.AddDate(years, months, days).Add(hours)``: month and day overflow normalise."""
    month0 = moment.month - 1 + months
    year = moment.year + years + month0 // 12
    month = month0 % 12 + 1
    if not 1 <= year <= 9999:
        return None
    try:
        first = moment.replace(year=year, month=month, day=1)
        return first + timedelta(days=moment.day - 1 + days, hours=hours)
    except OverflowError:
        return None


def parse_count(text: Any, option: str = "--keep-last") -> int:
    """A count: a non-negative number, or ``unlimited`` (-1)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif str(text).strip().lower() in ("unlimited", "all"):
        return UNLIMITED
    else:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise UsageError(f"{option} takes a number or 'unlimited', not {text!r}") from None
    if value < UNLIMITED:
        raise UsageError(f"{option} takes a number ≥ 0 or 'unlimited', not {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class Policy:
    """Which checkpoints to keep (see the module docstring)."""

    last: int = 0
    hourly: int = 0
    daily: int = 0
    weekly: int = 0
    monthly: int = 0
    yearly: int = 0
    within: Duration | None = None
    runs_within: Duration | None = None

    @property
    def checkpoint_rules(self) -> bool:
        """Any rule that keeps some checkpoints of a run (not only whole runs)."""
        return any(getattr(self, n) for n in COUNT_RULES) or (self.within is not None and not self.within.zero)

    @property
    def empty(self) -> bool:
        return not self.checkpoint_rules and (self.runs_within is None or self.runs_within.zero)

    def to_dict(self) -> dict[str, Any]:
        """The saved form: counts, durations as text; rules not set are left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Duration):
                if not value.zero:
                    out[f.name] = str(value)
            elif value:
                out[f.name] = "unlimited" if value == UNLIMITED else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Policy:
        data = dict(data or {})
        unknown = set(data) - set(COUNT_RULES) - set(DURATION_RULES)
        if unknown:
            raise UsageError(f"unknown retention rules {sorted(unknown)} (known: {', '.join(OPTIONS.values())})")
        counts = {n: parse_count(data[n], OPTIONS[n]) for n in COUNT_RULES if data.get(n) not in (None, 0, "0")}
        spans = {n: Duration.parse(str(data[n])) for n in DURATION_RULES if data.get(n)}
        return cls(**counts, **spans)

    def describe(self) -> str:
        """In words, like restic's policy line."""
        keeps = [("all" if getattr(self, n) == UNLIMITED else str(getattr(self, n))) + f" {_WORDS[n]}"
                 for n in COUNT_RULES if getattr(self, n)]
        text = f"keep {', '.join(keeps)} checkpoints per run" if keeps else ""
        if self.within is not None and not self.within.zero:
            text += (" and " if text else "keep ") + f"every checkpoint within {self.within} of a run's newest"
        if self.runs_within is not None and not self.runs_within.zero:
            text += ("; " if text else "") + f"delete whole runs untouched for {self.runs_within}"
            if not self.checkpoint_rules:
                text += " (other runs kept whole)"
        return text or "keep everything (no rule given)"

    def options(self) -> list[str]:
        """The command-line options that give this policy."""
        return [f"{OPTIONS[name]} {value}" for name, value in self.to_dict().items()]


_WORDS = {"last": "latest", "hourly": "hourly", "daily": "daily", "weekly": "weekly", "monthly": "monthly",
          "yearly": "yearly"}


def policy_from_options(**values: Any) -> Policy:
    """A Policy from the CLI's ``--keep-*`` values (None: not given)."""
    return Policy.from_dict({k: v for k, v in values.items() if v is not None})


def utc_now() -> datetime:
    return datetime.now(UTC)


def as_dict(policy: Policy) -> dict[str, Any]:
    return asdict(policy)
