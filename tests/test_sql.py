"""``lastgood sql``: the documented views, scoped to one store; read-only by two walls (the parse check
and the locked-down sandbox); a time limit; table, JSON, CSV, JSON-lines and Parquet output; secrets
redacted in the views themselves (a query cannot compute its way to one); the row cap with the
true count the SQL page needs."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from lastgood.config import load_settings
from lastgood.errors import UsageError
from lastgood.index.catalog import Catalog
from lastgood.index.sql import EXAMPLES, VIEWS, QueryRefused, QueryTimeout, describe_views, run_query
from lastgood.readers.native.writer import NativeWriter, SaveRequest
from lastgood.stores import index_store, open_catalog
from tests.cli_inprocess import run_cli
from tests.helpers import ROOT, SAMPLE_STORE, T0, lastgood_cli, write_store

SECRETS = {"run_id": "sk-SQLRUNMARKER0123456789", "checkpoint_id": "sk-SQLCKPTMARKER0123456789",
           "agent": "sk-SQLAGENTMARKER0123456", "metadata": "sk-SQLMETAMARKER0123456789",
           "event": "sk-SQLEVENTMARKER0123456789", "plain": "SQLPLAINPASSWORD42"}


def leaked(text: str) -> list[str]:
    return [name for name, marker in SECRETS.items() if marker in text]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One index holding a copy of the sample store, a small second store and a store full of secrets."""
    base = tmp_path_factory.mktemp("sql")
    sample, other, secret = base / "agents", base / "other", base / "secret"
    shutil.copytree(SAMPLE_STORE, sample)
    write_store(str(other), runs=2, steps=4)
    NativeWriter(str(secret)).save_many([
        SaveRequest(SECRETS["run_id"], {"messages": []}, agent=SECRETS["agent"], created_at=T0,
                    metadata={"config": {"api_key": SECRETS["plain"]}, "note": f"uses {SECRETS['metadata']}"},
                    checkpoint_id=SECRETS["checkpoint_id"],
                    event={"kind": "error", "message": f"401 for {SECRETS['event']}"}),
        SaveRequest("plain-run", {"ok": 1}, agent="plain", created_at=T0),
    ])
    home = base / "home"
    catalog = open_catalog(load_settings(home))
    for path in (sample, other, secret):
        index_store(catalog, str(path))
    catalog.close()
    return {"sample": sample, "other": other, "secret": secret, "home": home}


@pytest.fixture(scope="module")
def catalog(stores: dict[str, Path]):
    """The index, opened per operation (as the dashboard does): the commands run beside it."""
    return Catalog(load_settings(stores["home"]).index_path, keep_open=False)


def store_id(catalog, path: Path) -> int:
    with catalog.connect() as con:
        return int(con.execute("SELECT store_id FROM stores WHERE url = ?", [str(path)]).fetchone()[0])


def sql(stores: dict[str, Path], store: str | None, query: str, *args: str, env: dict[str, str] | None = None):
    """``lastgood sql`` in this process (tests.cli_inprocess); a few tests run the real console script."""
    target = [str(stores[store])] if store else ["--all-stores"]
    return run_cli("sql", *target, query, *args, home=stores["home"], env=env)


# ---- the views ----------------------------------------------------------------------------------

def test_every_view_has_its_documented_columns(catalog, stores: dict[str, Path]) -> None:
    docs = (ROOT / "docs" / "sql.md").read_text()
    sid = store_id(catalog, stores["sample"])
    for view in VIEWS:
        table, _, _ = run_query(catalog, sid, f"DESCRIBE {view.name}", limit=None)
        described = list(zip(table.column("column_name").to_pylist(), table.column("column_type").to_pylist()))
        assert described == [(c.name, c.type) for c in view.columns], view.name
        assert f"### `{view.name}`" in docs
        for column in view.columns:
            assert f"| `{column.name}` | {column.type} |" in docs, (view.name, column.name)
    everywhere, _, _ = run_query(catalog, None, "DESCRIBE findings", limit=None)
    assert everywhere.column("column_name").to_pylist()[0] == "store"


def test_a_store_sees_only_its_own_rows(catalog, stores: dict[str, Path]) -> None:
    for name in ("sample", "other"):
        listed = json.loads(run_cli("ls", str(stores[name]), "--format", "json", home=stores["home"]).stdout)
        done = sql(stores, name, "SELECT run_id, checkpoint_id FROM checkpoints", "--format", "json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)["rows"]
        assert sorted((r["run_id"], r["checkpoint_id"]) for r in rows) == \
            sorted((r["run_id"], r["checkpoint_id"]) for r in listed)
    everything = json.loads(sql(stores, None, "SELECT store, count(*) AS n FROM checkpoints GROUP BY store "
                                              "ORDER BY store", "--format", "json").stdout)["rows"]
    assert {r["store"] for r in everything} == {str(stores[n]) for n in ("sample", "other", "secret")}


def test_the_runs_view_agrees_with_lastgood_runs(stores: dict[str, Path]) -> None:
    expected = json.loads(run_cli("runs", str(stores["sample"]), "--format", "json", home=stores["home"]).stdout)
    fields = [f for f in expected[0] if f not in ("namespace",)]
    done = sql(stores, "sample", f"SELECT namespace, {', '.join(fields)} FROM runs", "--format", "json")
    got = {(r["run_id"], r["namespace"]): r for r in json.loads(done.stdout)["rows"]}
    assert {(r["run_id"], r["namespace"]): r for r in expected} == got
    assert {r["health"] for r in expected} >= {"damaged", "good"}  # the sample has both


def test_the_findings_view_agrees_with_verify(stores: dict[str, Path]) -> None:
    verify = json.loads(run_cli("verify", str(stores["sample"]), "--format", "json",
                                     home=stores["home"]).stdout)["findings"]
    rows = json.loads(sql(stores, "sample", "SELECT * FROM findings", "--format", "json").stdout)["rows"]
    key = lambda f, check: tuple(str(f[k]) for k in ("run_id", "checkpoint_id", check, "severity", "message", "depth"))  # noqa: E731
    assert sorted(key(f, "check") for f in verify) == sorted(key(r, "check_id") for r in rows)
    assert rows  # the sample store's damage is there


def test_every_example_query_runs(catalog, stores: dict[str, Path]) -> None:
    sid = store_id(catalog, stores["sample"])
    for title, query in EXAMPLES:
        table, total, _ = run_query(catalog, sid, query)
        assert table.num_columns, title
    stale, _, _ = run_query(catalog, sid, EXAMPLES[0][1], limit=None)
    assert stale.num_rows == 15  # every sample run's last good checkpoint is from 2026-11: older than a day


def test_the_row_cap_keeps_the_true_count(catalog, stores: dict[str, Path]) -> None:
    table, total, truncated = run_query(catalog, store_id(catalog, stores["sample"]),
                                        "SELECT * FROM checkpoints ORDER BY created_at", limit=5)
    assert (table.num_rows, total, truncated) == (5, 2386, True)
    table, total, truncated = run_query(catalog, store_id(catalog, stores["sample"]), "SELECT 1 AS one", limit=5)
    assert (table.num_rows, total, truncated) == (1, 1, False)


def test_without_a_query_it_lists_the_views(stores: dict[str, Path]) -> None:
    done = run_cli("sql", str(stores["sample"]), "--format", "json", home=stores["home"])
    listed = json.loads(done.stdout)
    assert [v["name"] for v in listed["views"]] == [v.name for v in VIEWS] == [v["name"] for v in describe_views()]
    assert len(listed["examples"]) == len(EXAMPLES)
    table = run_cli("sql", str(stores["sample"]), home=stores["home"]).stdout
    assert "checkpoints — One row per checkpoint" in table and "-- Biggest checkpoints" in table


# ---- read-only: the first wall (the parse check) -------------------------------------------------

REFUSED = {
    "COPY (SELECT 1) TO '{tmp}/out.csv'": "not COPY",
    "SELECT * FROM read_csv('/etc/passwd')": "read_csv() is not available",
    "SELECT (SELECT count(*) FROM read_text('/etc/passwd'))": "read_text() is not available",
    "SELECT * FROM '/etc/passwd'": "no view '/etc/passwd'",
    "ATTACH '{tmp}/other.duckdb' AS other": "not ATTACH",
    "DETACH memory": "not DETACH",
    "INSTALL httpfs": "not LOAD",
    "LOAD httpfs": "not LOAD",
    "SET enable_external_access = true": "not SET",
    "PRAGMA version": "not PRAGMA",
    "CALL duckdb_settings()": "not CALL",
    "EXPORT DATABASE '{tmp}/export'": "not EXPORT",
    "CREATE TABLE t AS SELECT 1": "not CREATE",
    "UPDATE checkpoints SET status = 'ok'": "not UPDATE",
    "SELECT 1; DROP VIEW checkpoints": "2 statements",
    "SELECT * FROM duckdb_tables()": "duckdb_tables() is not available",
    "SELECT * FROM query('SELECT 1')": "query() is not available",
    "SELECT * FROM lastgood_src_rows": "no view 'lastgood_src_rows'",
    "SELECT * FROM memory.main.checkpoints": "without a database or schema",
    "SELECT * FROM (WITH duckdb_views AS (SELECT 1) SELECT 1), duckdb_views": "may not be named 'duckdb_views'",
    "SHOW TABLES": "SHOW is not available",
}


def test_anything_but_a_query_over_the_views_is_refused_before_it_runs(catalog, stores: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    sid = store_id(catalog, stores["sample"])
    for query, message in REFUSED.items():
        with pytest.raises(QueryRefused, match=re.escape(message)):
            run_query(catalog, sid, query.format(tmp=tmp_path))
    assert list(tmp_path.iterdir()) == []  # nothing was written
    done = lastgood_cli("sql", str(stores["sample"]), f"COPY (SELECT * FROM checkpoints) TO '{tmp_path}/leak.csv'",
                        home=stores["home"])  # the real console script
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("lastgood: error: only queries run here") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "leak.csv").exists()


# ---- read-only: the second wall (the sandbox) ------------------------------------------------------

def sandbox(catalog, sid: int, views: set[str]):
    """The sandbox a query over ``views`` of store ``sid`` runs in (the parse check skipped)."""
    import duckdb

    from lastgood.index import sql as module

    con = duckdb.connect(":memory:", config=dict(module.SANDBOX_CONFIG))
    sources = module.load_sources(catalog, sid, module.needed_sources(views, False))
    module.build_sandbox(con, sources, views, False)
    return con


def test_the_sandbox_itself_cannot_touch_files_extensions_or_settings(catalog, stores: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    import duckdb

    con = sandbox(catalog, store_id(catalog, stores["sample"]), {"checkpoints", "runs"})
    try:
        assert con.execute("SELECT count(*) FROM checkpoints").fetchone()[0] == 2386
        for statement in (f"COPY (SELECT 1) TO '{tmp_path}/out.csv'", "SELECT * FROM read_csv('/etc/passwd')",
                          f"ATTACH '{tmp_path}/x.duckdb' AS x", f"ATTACH '{stores['home']}/index.duckdb' AS idx",
                          "INSTALL httpfs", "LOAD httpfs", "SET enable_external_access = true", "SET threads = 1",
                          "SELECT * FROM read_csv('https://example.com/data.csv')",
                          f"EXPORT DATABASE '{tmp_path}/export'"):
            with pytest.raises(duckdb.Error, match="disabled|locked"):
                con.execute(statement)
        # the other stores' rows and the index's tables are simply not there
        with pytest.raises(duckdb.CatalogException):
            con.execute("SELECT * FROM checkpoint_rows")
        assert con.execute("SELECT count(DISTINCT store_id) FROM lastgood_raw_checkpoints").fetchone()[0] == 1
    finally:
        con.close()
    assert list(tmp_path.iterdir()) == []


def test_a_part_read_in_place_is_reached_read_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    store = tmp_path / "store"
    write_store(str(store), runs=3, steps=10)
    NativeWriter(str(store)).compact()
    monkeypatch.setenv("LASTGOOD_ATTACH_BYTES", "1")  # its one compacted part is read in place
    catalog = open_catalog(load_settings(tmp_path / "home"))
    sid = index_store(catalog, str(store), check="none").store.store_id
    with catalog.connect() as con:
        (part,) = [p for (p,) in con.execute("SELECT path FROM attached_parts").fetchall()]
    before = Path(part).read_bytes()
    table, total, _ = run_query(catalog, sid, "SELECT count(*) AS n, count(DISTINCT run_id) AS runs FROM checkpoints")
    assert table.to_pylist() == [{"n": 30, "runs": 3}]
    con = sandbox(catalog, sid, {"checkpoints"})
    try:
        url = f"lastgoodpart://{sid}.parquet"
        with pytest.raises(duckdb.Error):
            con.execute(f"COPY (SELECT 1 AS a) TO '{url}' (FORMAT parquet, USE_TMP_FILE false)")
        with pytest.raises(duckdb.Error, match="disabled"):
            con.execute(f"SELECT * FROM read_parquet('{part}')")  # the real path: not reachable
        with pytest.raises(duckdb.Error, match="disabled"):
            con.execute("SELECT * FROM read_parquet('lastgoodpart://999.parquet')")
    finally:
        con.close()
    assert Path(part).read_bytes() == before
    catalog.close()


def test_a_long_query_is_stopped_at_its_time_limit(catalog, stores: dict[str, Path]) -> None:
    started = time.monotonic()
    with pytest.raises(QueryTimeout, match="longer than 0.5 s"):
        run_query(catalog, store_id(catalog, stores["other"]),
                  "SELECT sum(hash(range)) FROM range(100000000000)", timeout=0.5)
    assert time.monotonic() - started < 10
    done = sql(stores, "other", "SELECT sum(hash(range)) FROM range(100000000000)", "--timeout", "1")
    assert done.returncode == 2 and "the query ran longer than 1 s and was stopped" in done.stderr


def test_a_failing_query_is_one_line(stores: dict[str, Path]) -> None:
    done = lastgood_cli("sql", str(stores["sample"]), "SELECT no_such_column FROM checkpoints", home=stores["home"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("lastgood: error: the query failed: Binder Error") and \
        len(done.stderr.splitlines()) == 1
    assert sql(stores, "sample", "").returncode == 2


# ---- output ------------------------------------------------------------------------------------

QUERY = "SELECT run_id, count(*) AS checkpoints, sum(size_bytes) AS bytes, max(created_at) AS last_at, " \
        "any_value(metadata) AS metadata FROM checkpoints GROUP BY run_id ORDER BY run_id"


def test_json_csv_jsonl_and_parquet_hold_the_same_rows(stores: dict[str, Path], tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    body = json.loads(sql(stores, "other", QUERY, "--format", "json").stdout)
    assert [c["name"] for c in body["columns"]] == ["run_id", "checkpoints", "bytes", "last_at", "metadata"]
    assert body["columns"][4]["type"] == "JSON" and body["total_rows"] == 2 and body["truncated"] is False
    rows = body["rows"]
    assert [r["checkpoints"] for r in rows] == [4, 4] and all(isinstance(r["metadata"], dict) for r in rows)
    assert rows[0]["last_at"].endswith("Z")
    for suffix in ("csv", "parquet", "json", "jsonl"):
        done = sql(stores, "other", QUERY, "-o", str(tmp_path / f"out.{suffix}"))
        assert done.returncode == 0 and done.stdout == "" and f"wrote 2 row(s)" in done.stderr, done.stderr
    with open(tmp_path / "out.csv", newline="") as handle:
        parsed = list(csv.DictReader(handle))
    assert [(r["run_id"], int(r["checkpoints"]), int(r["bytes"])) for r in parsed] == \
        [(r["run_id"], r["checkpoints"], r["bytes"]) for r in rows]
    table = pq.read_table(tmp_path / "out.parquet")
    assert table.column("bytes").to_pylist() == [r["bytes"] for r in rows]
    assert json.loads((tmp_path / "out.json").read_text()) == rows
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()] == rows
    stdout_csv = sql(stores, "other", QUERY, "--format", "csv").stdout
    assert stdout_csv == (tmp_path / "out.csv").read_text()
    assert sql(stores, "other", QUERY, "--format", "parquet").returncode == 2  # Parquet needs -o
    assert sql(stores, "other", QUERY, "-o", str(tmp_path / "out.xyz")).returncode == 2


def test_the_table_fits_the_terminal_and_escapes_control_characters(stores: dict[str, Path]) -> None:
    query = ("SELECT run_id, checkpoint_id, step, created_at, status, status_reason, metadata FROM checkpoints "
             "WHERE status <> 'ok' ORDER BY created_at LIMIT 3")
    wide = sql(stores, "sample", query, "--wide", env={"COLUMNS": "100"}).stdout.splitlines()
    done = sql(stores, "sample", query, env={"COLUMNS": "100"})
    lines = done.stdout.splitlines()
    assert max(map(len, wide)) > 100 and done.returncode == 0 and all(len(line) <= 100 for line in lines), lines
    assert lines[-1] == "3 row(s)" and "…" in done.stdout
    done = sql(stores, "sample", "SELECT chr(27) || '[31mred' AS x, 'a' || chr(10) || 'b' AS y")
    assert "\x1b" not in done.stdout and "\\x1b[31mred" in done.stdout and "a\\nb" in done.stdout
    capped = sql(stores, "sample", "SELECT * FROM checkpoints", "--limit", "2", env={"COLUMNS": "100"})
    assert capped.stdout.splitlines()[-1] == "2 of 2,386 row(s) shown (--limit)"


# ---- secrets -------------------------------------------------------------------------------------

def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The command run by ``lastgood.cli.main`` in this process (faster than a new one per format)."""
    from lastgood.cli.main import main
    from lastgood.index.catalog import close_all

    try:
        code = main(list(args))
    finally:
        close_all()  # the commands below open the index in their own processes
    out, err = capsys.readouterr()
    return code, out + err


def test_no_secret_reaches_any_output(stores: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    everything = " UNION ALL ".join(f"SELECT {v}::VARCHAR AS row FROM {v}"  # every column of every view, as text
                                    for v in ("checkpoints", "events", "runs", "findings", "actions"))
    computed = (f"SELECT metadata->'config' AS config, metadata->>'note' AS note, '{SECRETS['event']}' AS typed, "
                f"'password: {SECRETS['plain']}' AS pair FROM checkpoints")
    home = ["--home", str(stores["home"])]
    for query in (everything, computed):
        for fmt in ("table", "json", "csv", "jsonl"):
            code, text = in_process(capsys, "sql", str(stores["secret"]), query, "--format", fmt, *home)
            assert code == 0, text
            assert not leaked(text), (query, fmt, leaked(text))
        in_process(capsys, "sql", str(stores["secret"]), query, "-o", str(tmp_path / "out.parquet"), *home)
        assert not leaked((tmp_path / "out.parquet").read_bytes().decode("latin-1"))
    for view in ("checkpoints", "events", "runs", "findings"):  # the rows as JSON objects (metadata a tree)
        code, text = in_process(capsys, "sql", str(stores["secret"]), f"SELECT * FROM {view}", "--format", "json",
                                *home)
        assert code == 0 and (json.loads(text)["rows"] or view == "findings") and not leaked(text), (view, leaked(text))
    table = json.loads(sql(stores, "secret", "SELECT * FROM checkpoints ORDER BY agent", "--format",
                           "json").stdout)["rows"]
    secret_row = next(r for r in table if r["run_id"] != "plain-run")
    assert secret_row["run_id"].startswith("key:") and secret_row["checkpoint_id"].startswith("key:")
    assert secret_row["agent"] == "[redacted]" and secret_row["metadata"]["config"]["api_key"] == "[redacted]"
    shown = run_cli("show", str(stores["secret"]), secret_row["checkpoint_id"], "--format", "json",
                         home=stores["home"])
    assert shown.returncode == 0 and json.loads(shown.stdout)["checkpoint"]["agent"] == "[redacted]"
    joined = json.loads(sql(stores, "secret", "SELECT count(*) AS n FROM events e JOIN checkpoints c "
                                              "USING (run_id, namespace, checkpoint_id)", "--format", "json").stdout)
    assert joined["rows"] == [{"n": 1}]  # handles stay joinable


def test_a_query_cannot_compute_its_way_to_a_secret(catalog, stores: dict[str, Path]) -> None:
    sid = store_id(catalog, stores["secret"])
    probes = {
        "SELECT count(*) AS n FROM events WHERE message LIKE '%SQLEVENTMARKER%'": [{"n": 0}],
        "SELECT count(*) AS n FROM checkpoints WHERE metadata::VARCHAR LIKE '%SQLPLAINPASSWORD%'": [{"n": 0}],
        "SELECT count(*) AS n FROM checkpoints WHERE run_id LIKE 'sk-%' OR agent LIKE 'sk-%'": [{"n": 0}],
    }
    for query, expected in probes.items():
        assert run_query(catalog, sid, query)[0].to_pylist() == expected, query
    pieces, _, _ = run_query(catalog, sid, "SELECT substr(message, 9, 6) AS a, substr(message, 15, 20) AS b, "
                                           "length(message) AS n FROM events")
    assert not leaked(json.dumps(pieces.to_pylist())) and "SQLEVE" not in json.dumps(pieces.to_pylist())
    with pytest.raises(UsageError):
        run_query(catalog, sid, "SELECT * FROM lastgood_src_events")


# ---- what the sandbox loads --------------------------------------------------------------------

def test_only_the_columns_a_query_names_are_read_and_any_doubt_reads_them_all() -> None:
    import duckdb

    from lastgood.index.sql_guard import check_query

    con = duckdb.connect()
    named = {
        "SELECT run_id, count(*), sum(size_bytes) AS b FROM checkpoints GROUP BY run_id ORDER BY b":
            {"run_id", "size_bytes"},
        "SELECT count(*) FROM checkpoints": set(),
        "SELECT c.metadata->>'a' FROM checkpoints c": {"metadata"},
        "WITH x(step) AS (SELECT run_id FROM checkpoints) SELECT step FROM x": {"run_id", "step"},
        "SELECT e.kind FROM events e JOIN checkpoints c USING (run_id, checkpoint_id)":
            {"kind", "run_id", "checkpoint_id"},
    }
    for query, columns in named.items():
        assert check_query(con, query).columns == columns, query
    for query in ("SELECT * FROM checkpoints", "SELECT c FROM checkpoints c", "SELECT to_json(c) FROM checkpoints c",
                  "SELECT step FROM checkpoints AS x(step)", "SELECT #1 FROM checkpoints", "DESCRIBE checkpoints",
                  "SELECT step FROM checkpoints step", "SELECT COLUMNS('step') FROM checkpoints",
                  "SELECT run_id FROM checkpoints NATURAL JOIN runs", "SELECT run_id FROM checkpoints ORDER BY ALL"):
        assert check_query(con, query).columns is None, query


@pytest.fixture(scope="module")
def part_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Catalog, int]:
    """A store whose one compacted part the index reads in place (the sample store's rows, beside
    it, are in the index's own table)."""
    base = tmp_path_factory.mktemp("parts")
    store = base / "store"
    write_store(str(store), runs=3, steps=10)
    NativeWriter(str(store)).compact()
    catalog = open_catalog(load_settings(base / "home"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LASTGOOD_ATTACH_BYTES", "1")
        sid = index_store(catalog, str(store), check="none").store.store_id
    with catalog.connect() as con:
        assert con.execute("SELECT count(*) FROM attached_parts").fetchone()[0] == 1
    return catalog, sid


@pytest.mark.parametrize("query", [
    "SELECT run_id, count(*) AS n, sum(size_bytes) AS b, max(created_at) AS t FROM checkpoints GROUP BY ALL",
    "SELECT checkpoint_id, parent_id, step, data_checked, status FROM checkpoints",
    "SELECT run_id, health, last_good, checkpoints, size_bytes FROM runs",
])
def test_a_query_naming_some_columns_answers_as_one_reading_them_all(part_store, catalog,
                                                                     stores: dict[str, Path], query: str) -> None:
    every = f"SELECT * FROM ({query.replace('FROM checkpoints', 'FROM (SELECT * FROM checkpoints)')}) ORDER BY ALL"
    pruned = f"SELECT * FROM ({query}) ORDER BY ALL"
    for index, sid in (part_store, (catalog, store_id(catalog, stores["sample"]))):
        expected = run_query(index, sid, every, limit=None)[0].to_pylist()
        assert expected and run_query(index, sid, pruned, limit=None)[0].to_pylist() == expected, query


def test_python_redaction_is_installed_only_when_a_value_needs_it(catalog, stores: dict[str, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.index import sql_redact

    installed = []
    real = sql_redact.install_functions
    monkeypatch.setattr(sql_redact, "install_functions", lambda con: (installed.append(1), real(con)))
    clean = run_query(catalog, store_id(catalog, stores["other"]), "SELECT run_id, agent FROM checkpoints")[0]
    assert clean.num_rows == 8 and installed == []  # nothing secret-shaped: the stand-ins were never reached
    secret = run_query(catalog, store_id(catalog, stores["secret"]), "SELECT run_id, agent FROM checkpoints")[0]
    row = next(r for r in secret.to_pylist() if r["run_id"] != "plain-run")
    assert installed == [1] and row["run_id"].startswith("key:") and row["agent"] == "[redacted]"
    assert secret.num_rows == 2 and not leaked(json.dumps(secret.to_pylist()))
