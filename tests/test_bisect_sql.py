"""``bisect --where "sql: EXPR"``: a SQL expression over tracked fields, checked against a
brute-force scan of the decoded states, and hostile expressions refused (exit 2, one line)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest

from lastgood.investigate import history as inv
from lastgood.index.catalog import Catalog
from lastgood.errors import UsageError
from lastgood.investigate.predicate_sql import evaluate, parse_sql
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store
from tests.helpers import T0, lastgood_cli

RUNS = 6
STEPS = 30


def _state(rng: random.Random, step: int) -> dict:
    return {"balance": rng.randint(-20, 100), "messages": [{"role": "user", "content": "hi"}] * rng.randint(0, 9),
            "status": rng.choice(["ok", "ok", "ok", "failed"]), "done": rng.random() < 0.2,
            "plan": {"step": step, "name": f"p{rng.randint(0, 3)}"}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("bisect_sql")
    rng = random.Random(7)
    writer = NativeWriter(str(base / "store"), codec="json", full_every=4)
    states: dict[str, list[dict]] = {}
    for r in range(RUNS):
        for step in range(STEPS):
            state = _state(rng, step)
            writer.save(f"run-{r}", state, created_at=T0 + timedelta(minutes=step), step=step)
            states.setdefault(f"run-{r}", []).append(state)
    return base, states


CASES = [  # the SQL expression and the same predicate in Python, for the brute-force scan
    ("sql: balance < 0", lambda s: s["balance"] < 0),
    ("sql: balance < 0 AND messages > 5", lambda s: s["balance"] < 0 and len(s["messages"]) > 5),
    ("sql: status = 'failed' OR done", lambda s: s["status"] == "failed" or s["done"]),
    ('sql: "plan/step" >= 12 and "plan/name" = \'p2\'', lambda s: s["plan"]["step"] >= 12 and s["plan"]["name"] == "p2"),
    ("sql: abs(balance) between 95 and 100", lambda s: 95 <= abs(s["balance"]) <= 100),
    ("sql: balance > 1000", lambda s: False),
]


@pytest.mark.parametrize("where, truth", CASES, ids=[c[0] for c in CASES])
def test_sql_bisect_agrees_with_a_brute_force_scan(runs, where, truth) -> None:
    base, states = runs
    catalog = Catalog(base / f"home-{CASES.index((where, truth))}" / "index.duckdb")
    store = index_store(catalog, str(base / "store")).store
    predicate = parse_sql(where)
    for run, history in states.items():
        brute = next((step for step, state in enumerate(history) if truth(state)), None)
        first = inv.bisect_run_sql(catalog, store, run, predicate)
        again = inv.bisect_run_sql(catalog, store, run, predicate)
        assert (first["found"] or {}).get("step") == brute, (run, where)
        assert first["matches"] == sum(map(truth, history))
        assert first["states_decoded"] == STEPS  # one decode per checkpoint, whatever the fields
        assert again["states_decoded"] == 0 and again["found"] == first["found"]  # all values tracked now
        assert first["strategy"] == "sql scan" and first["checkpoints"] == STEPS
    catalog.close()


def test_fields_tracked_before_cost_nothing_and_map_to_paths(runs) -> None:
    base, states = runs
    catalog = Catalog(base / "home-fields" / "index.duckdb")
    store = index_store(catalog, str(base / "store")).store
    inv.track_field(catalog, store, "run-2", "/balance")
    inv.track_field(catalog, store, "run-2", "len(/messages)")
    result = inv.bisect_run_sql(catalog, store, "run-2", parse_sql("sql: Balance < 10 and messages >= 3"))
    assert result["states_decoded"] == 0 and result["fields"] == {"Balance": "/balance", "messages": "/messages"}
    brute = next(i for i, s in enumerate(states["run-2"]) if s["balance"] < 10 and len(s["messages"]) >= 3)
    assert result["found"]["step"] == brute
    catalog.close()


HOSTILE = [
    "sql: balance < 0; DROP TABLE checkpoints",
    "sql: 1=1; SELECT * FROM stores",
    "sql: balance < (SELECT count(*) FROM checkpoints)",
    "sql: EXISTS (SELECT 1 FROM tracked_values)",
    "sql: balance IN (SELECT step FROM checkpoints)",
    "sql: checkpoints.run_id = 'run-0'",
    "sql: 1) UNION SELECT 1 FROM (SELECT 1",
    "sql: true) GROUP BY (1",
    "sql: read_text('/etc/passwd') IS NOT NULL",
    "sql: balance <",
    "sql:",
]


@pytest.mark.parametrize("where", HOSTILE)
def test_hostile_expressions_are_refused(where) -> None:
    with pytest.raises(UsageError):  # by the parser's shape check, or (read_text) by the sandbox
        evaluate(parse_sql(where), {"balance": [None, None, None]}, 3)


def test_cli_json_output_and_hostile_expressions_exit_2(runs, tmp_path) -> None:
    base, states = runs
    url, home = str(base / "store"), tmp_path / "home"
    done = lastgood_cli("bisect", url, "run-0", "--where", "sql: balance < 0", "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    brute = next(i for i, s in enumerate(states["run-0"]) if s["balance"] < 0)
    assert body["found"]["step"] == brute and body["strategy"] == "sql scan"
    assert body["states_decoded"] == STEPS and body["fields"] == {"balance": "/balance"}
    assert set(body) >= {"run_id", "namespace", "where", "strategy", "checkpoints", "states_decoded", "found",
                         "unreadable"}
    again = json.loads(lastgood_cli("bisect", url, "run-0", "--where", "sql: balance < 0", "--format", "json",
                                    home=home).stdout)
    assert again["states_decoded"] == 0 and again["found"] == body["found"]
    text = lastgood_cli("bisect", url, "run-0", "--where", "sql: balance < 0", home=home)
    assert "sql scan; 0 of 30 states decoded" in text.stdout
    for where in HOSTILE:
        refused = lastgood_cli("bisect", url, "run-0", "--where", where, home=home)
        assert refused.returncode == 2, (where, refused.stdout)
        assert refused.stderr.startswith("lastgood: error:") and len(refused.stderr.strip().splitlines()) == 1
        assert "Traceback" not in refused.stderr
    rows = json.loads(lastgood_cli("ls", url, "--format", "json", home=home).stdout)
    assert len(rows) == RUNS * STEPS  # the index is intact
