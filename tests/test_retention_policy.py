"""Retention policies: restic's durations and rules, and the SQL that applies them checked against a
line-by-line port of restic's own ``ApplyPolicy`` (internal/data/snapshot_policy.go) on random
timelines (hypothesis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lastgood.errors import UsageError
from lastgood.retention.plan import policy_keeps
from lastgood.retention.policy import UNLIMITED, Duration, Policy, add_date, parse_count

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


# ---- restic's algorithm, ported line by line (the reference) -----------------------------------


def _ymdh(t: datetime, _nr: int) -> int:
    return t.year * 1000000 + t.month * 10000 + t.day * 100 + t.hour


def _ymd(t: datetime, _nr: int) -> int:
    return t.year * 10000 + t.month * 100 + t.day


def _yw(t: datetime, _nr: int) -> int:
    year, week, _ = t.isocalendar()
    return year * 100 + week


def _ym(t: datetime, _nr: int) -> int:
    return t.year * 100 + t.month


def _y(t: datetime, _nr: int) -> int:
    return t.year


def _always(_t: datetime, nr: int) -> int:
    return nr


def restic_apply(times: list[datetime], policy: Policy, now: datetime) -> list[bool]:
    """restic's ApplyPolicy over ``times`` sorted newest first: whether each is kept."""
    buckets = [[policy.last, _always, -1], [policy.hourly, _ymdh, -1], [policy.daily, _ymd, -1],
               [policy.weekly, _yw, -1], [policy.monthly, _ym, -1], [policy.yearly, _y, -1]]
    latest = None
    for t in times:  # findLatestTimestamp: the newest not in the future
        if (latest is None or t > latest) and t < now:
            latest = t
    keep = []
    for nr, cur in enumerate(times):
        keep_snap = False
        if policy.within is not None and not policy.within.zero:
            cutoff = policy.within.before(latest) if latest is not None else None
            if cutoff is None or cur > cutoff:
                keep_snap = True
        for b in buckets:
            if b[0] > 0 or b[0] == -1:
                val = b[1](cur, nr)
                if val != b[2] or nr == len(times) - 1:
                    keep_snap = True
                    b[2] = val
                    if b[0] > 0:
                        b[0] -= 1
        keep.append(keep_snap)
    return keep


# ---- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("2d", Duration(days=2)), ("1y2m", Duration(years=1, months=2)), ("36h", Duration(hours=36)),
    ("6y5m234d37h", Duration(6, 5, 234, 37)), (" 3d ", Duration(days=3)), ("1d2d", Duration(days=2))])
def test_durations_parse_like_restic(text: str, expected: Duration) -> None:
    assert Duration.parse(text) == expected


@pytest.mark.parametrize("text", ["", "2", "d", "2w", "2days", "1.5d", "2d x"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(UsageError, match="duration"):
        Duration.parse(text)


def test_going_back_by_months_normalises_like_go() -> None:
    assert add_date(datetime(2026, 3, 31, tzinfo=UTC), 0, -1, 0) == datetime(2026, 3, 3, tzinfo=UTC)
    assert add_date(datetime(2024, 3, 1, 5, tzinfo=UTC), -1, 0, 0) == datetime(2023, 3, 1, 5, tzinfo=UTC)
    assert Duration(days=1, hours=2).before(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2025, 12, 30, 22,
                                                                                           tzinfo=UTC)
    assert Duration(years=3000).before(datetime(2026, 1, 1, tzinfo=UTC)) is None


def test_counts_and_policies_round_trip() -> None:
    assert parse_count("unlimited") == UNLIMITED and parse_count("7") == 7
    with pytest.raises(UsageError):
        parse_count("-3")
    policy = Policy(last=10, daily=UNLIMITED, within=Duration(days=2), runs_within=Duration(months=1))
    assert Policy.from_dict(policy.to_dict()) == policy
    assert policy.to_dict() == {"last": 10, "daily": "unlimited", "within": "2d", "runs_within": "1m"}
    assert "10 latest" in policy.describe() and "untouched for 1m" in policy.describe()
    assert Policy().empty and not Policy(runs_within=Duration(days=1)).checkpoint_rules
    with pytest.raises(UsageError, match="unknown retention rules"):
        Policy.from_dict({"keep_everything": 1})


# ---- the SQL against restic ----------------------------------------------------------------------


def test_oldest_kept_when_buckets_run_out_like_restic_0_17() -> None:
    times = [NOW - timedelta(hours=h) for h in (1, 2, 3)]  # one day: daily 3 keeps the newest and the oldest
    reasons = policy_keeps([("r", t) for t in times], Policy(daily=3), NOW)
    assert reasons == [["daily (3)"], [], ["oldest daily"]]


def test_keep_within_is_relative_to_the_newest_checkpoint_not_now() -> None:
    times = [NOW - timedelta(days=400, hours=h) for h in (0, 5, 30)]
    reasons = policy_keeps([("r", t) for t in times], Policy(within=Duration(days=1)), NOW)
    assert [bool(r) for r in reasons] == [True, True, False]


timeline = st.lists(st.integers(min_value=0, max_value=3 * 365 * 24 * 60), min_size=1, max_size=40)
counts = st.sampled_from([0, 0, 1, 2, 3, 5, UNLIMITED])
durations = st.one_of(st.none(), st.builds(Duration, st.integers(0, 1), st.integers(0, 3), st.integers(0, 20),
                                            st.integers(0, 30)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timeline, counts, counts, counts, counts, counts, counts, durations, st.integers(-60, 3 * 365 * 24 * 60))
def test_sql_keeps_exactly_what_restic_keeps(minutes: list[int], last: int, hourly: int, daily: int, weekly: int,
                                             monthly: int, yearly: int, within: Duration | None, future: int) -> None:
    policy = Policy(last, hourly, daily, weekly, monthly, yearly, within)
    if policy.empty:
        return
    start = datetime(2024, 12, 20, tzinfo=UTC)
    now = start + timedelta(minutes=future)  # some checkpoints may be "in the future"
    times = [start + timedelta(minutes=m) for m in minutes]
    order = sorted(range(len(times)), key=lambda i: (times[i], i), reverse=True)  # the plan's tie-break
    expected = restic_apply([times[i] for i in order], policy, now)
    reasons = policy_keeps([("run", t) for t in times], policy, now)
    assert [bool(reasons[i]) for i in order] == expected


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 60 * 24 * 60)), min_size=1, max_size=30),
       counts, counts)
def test_each_run_is_its_own_group(points: list[tuple[str, int]], last: int, daily: int) -> None:
    policy = Policy(last=last, daily=daily)
    if policy.empty:
        return
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [(run, start + timedelta(minutes=m)) for run, m in points]
    reasons = policy_keeps(rows, policy, NOW)
    for run in {r for r, _ in rows}:
        mine = [i for i, (r, _) in enumerate(rows) if r == run]
        order = sorted(mine, key=lambda i: (rows[i][1], i), reverse=True)
        assert [bool(reasons[i]) for i in order] == restic_apply([rows[i][1] for i in order], policy, NOW)
