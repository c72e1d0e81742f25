"""The CLI through its real console script: JSON shapes, exit codes, prefixes, redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lastgood.index import queries
from tests.helpers import SAMPLE_STORE, load_manifest, lastgood_cli, write_store

LS_KEYS = {"run_id", "namespace", "checkpoint_id", "parent_id", "step", "created_at", "trigger",
           "kind", "status", "status_reason", "size_bytes"}


@pytest.fixture(scope="module")
def sample_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    done = lastgood_cli("index", str(SAMPLE_STORE), "--format", "json", home=home)
    assert done.returncode == 0, done.stderr
    return home


@pytest.fixture(scope="module")
def sample_rows(sample_home: Path) -> list[dict]:
    done = lastgood_cli("ls", str(SAMPLE_STORE), "--format", "json", home=sample_home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_ls_lists_every_sample_checkpoint_with_the_manifest_statuses(sample_rows: list[dict]) -> None:
    manifest = load_manifest()
    assert len(sample_rows) == manifest["checkpoints"]
    assert all(set(r) == LS_KEYS | {"data_checked"} for r in sample_rows)  # the stable shape, plus one field
    assert all(r["data_checked"] is True for r in sample_rows)  # a small store: every blob decoded at once
    by_id = {r["checkpoint_id"]: r for r in sample_rows}
    for damaged in manifest["damaged"]:
        assert by_id[damaged["checkpoint_id"]]["status"] == damaged["expected_status"]
    bad = {d["checkpoint_id"] for d in manifest["damaged"]}
    assert all(r["status"] == "ok" for r in sample_rows if r["checkpoint_id"] not in bad)
    assert sample_rows[0]["created_at"].endswith("Z")


def test_ls_filters_by_run(sample_home: Path, sample_rows: list[dict]) -> None:
    run = sample_rows[0]["run_id"]
    done = lastgood_cli("ls", str(SAMPLE_STORE), "--run", run, "--format", "json", home=sample_home)
    rows = json.loads(done.stdout)
    assert rows and {r["run_id"] for r in rows} == {run}
    assert len(rows) == sum(1 for r in sample_rows if r["run_id"] == run)


def test_show_by_prefix_redacts_the_api_key(sample_home: Path, sample_rows: list[dict]) -> None:
    manifest = load_manifest()
    target = next(r for r in sample_rows if r["status"] == "ok" and r["kind"] == "incremental")
    done = lastgood_cli("show", str(SAMPLE_STORE), target["checkpoint_id"][:30], "--format", "json",
                      home=sample_home)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert set(shown) >= {"checkpoint", "state", "pending_writes"}
    assert shown["checkpoint"]["checkpoint_id"] == target["checkpoint_id"]
    assert shown["state"]["tools"]["api_key"] == "[redacted]"
    assert shown["state"]["llm"]["messages"][0]["role"] == "system"
    assert manifest["api_key"] not in done.stdout + done.stderr
    table = lastgood_cli("show", str(SAMPLE_STORE), target["checkpoint_id"], home=sample_home)
    assert table.returncode == 0 and manifest["api_key"] not in table.stdout


def test_no_command_prints_the_sample_secret(sample_home: Path) -> None:
    key = load_manifest()["api_key"]
    for args in (["ls", str(SAMPLE_STORE)], ["verify", str(SAMPLE_STORE), "--format", "json"],
                 ["index", str(SAMPLE_STORE), "--format", "json"]):
        done = lastgood_cli(*args, home=sample_home)
        assert key not in done.stdout + done.stderr


def test_show_of_a_damaged_checkpoint_explains_why(sample_home: Path) -> None:
    damaged = next(d for d in load_manifest()["damaged"] if d["damage"] == "sha256-mismatch")
    done = lastgood_cli("show", str(SAMPLE_STORE), damaged["checkpoint_id"], "--format", "json", home=sample_home)
    shown = json.loads(done.stdout)
    assert done.returncode == 0
    assert shown["state"] is None and "sha256 mismatch" in shown["state_error"]
    assert shown["checkpoint"]["status"] == "corrupt"
    assert any(f["check"] == "sha256-mismatch" for f in shown["findings"])


def test_verify_exits_1_on_error_findings(sample_home: Path) -> None:
    done = lastgood_cli("verify", str(SAMPLE_STORE), "--read-data", "--format", "json", home=sample_home)
    assert done.returncode == 1
    result = json.loads(done.stdout)
    checks = {f["check"] for f in result["findings"]}
    assert {"sha256-mismatch", "blob-missing", "catalog-line", "incomplete"} <= checks
    assert result["checked"] == load_manifest()["checkpoints"]


def test_verify_exits_0_on_a_healthy_store(tmp_path: Path) -> None:
    write_store(str(tmp_path / "s"), runs=1, steps=3)
    done = lastgood_cli("verify", str(tmp_path / "s"), "--read-data", home=tmp_path / "h")
    assert done.returncode == 0, done.stderr
    assert "0 error(s)" in done.stdout


def test_ambiguous_and_unknown_prefixes_are_usage_errors(sample_home: Path, sample_rows: list[dict]) -> None:
    done = lastgood_cli("show", str(SAMPLE_STORE), "01a1", home=sample_home)
    assert done.returncode == 2 and "matches several checkpoints" in done.stderr
    done = lastgood_cli("show", str(SAMPLE_STORE), "ffffffff", home=sample_home)
    assert done.returncode == 2 and "no checkpoint matches 'ffffffff'" in done.stderr


def test_bad_input_gets_one_line_errors(tmp_path: Path) -> None:
    done = lastgood_cli("ls", str(tmp_path / "missing"), home=tmp_path / "h")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "store not found" in done.stderr
    (tmp_path / "empty").mkdir()
    done = lastgood_cli("ls", str(tmp_path / "empty"), home=tmp_path / "h")
    assert done.returncode == 2 and "no reader recognises" in done.stderr
    done = lastgood_cli("ls", str(tmp_path / "empty"), "--reader", "nope", home=tmp_path / "h")
    assert done.returncode == 2 and "unknown reader 'nope'" in done.stderr
    done = lastgood_cli("ls", "gs://bucket/x", home=tmp_path / "h")
    assert done.returncode == 2 and "pip install 'lastgood[gcs]'" in done.stderr


@pytest.mark.parametrize("args", [("ls", str(SAMPLE_STORE), "--status", "CORRUPT"),
                                  ("ls", str(SAMPLE_STORE), "--format", "csv"), ("ls",),
                                  ("index", str(SAMPLE_STORE), "--check", "bogus"), ("ui", "--port", "abc"),
                                  ()])
def test_usage_errors_are_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    done = lastgood_cli(*args, home=tmp_path / "h")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and ": error: " in done.stderr and "--help" in done.stderr


def test_ls_names_the_statuses_it_knows(sample_home: Path) -> None:
    from lastgood.cli import main as cli
    from lastgood.readers.base import STATUSES

    from lastgood.cli import recovery as cli_recovery
    from lastgood.readers import journal

    assert cli.LISTED_STATUSES == STATUSES and cli_recovery.JOURNAL_ACTIONS == journal.ACTIONS
    done = lastgood_cli("ls", str(SAMPLE_STORE), "--status", "bogus", home=sample_home)
    assert done.returncode == 2 and all(s in done.stderr for s in STATUSES)


def test_error_counts_agree_after_structure_and_data_checks(tmp_path: Path) -> None:
    import shutil

    store = tmp_path / "agents"
    shutil.copytree(SAMPLE_STORE, store)
    home = tmp_path / "h"

    lastgood_cli("verify", str(store), "--read-data", home=home)
    verified = json.loads(lastgood_cli("verify", str(store), "--format", "json", home=home).stdout)
    # the structure check re-found what the data check found: still one finding each, everywhere
    runs = json.loads(lastgood_cli("runs", str(store), "--format", "json", home=home).stdout)
    index = json.loads(lastgood_cli("index", str(store), "--format", "json", home=home).stdout)
    errors = [f for f in verified["findings"] if f["severity"] == "error"]
    assert sum(r["errors"] for r in runs) == len([f for f in errors if f["checkpoint_id"]])
    assert sum(r["errors"] for r in runs) == len(load_manifest()["damaged"])
    assert index["overview"]["findings"]["error"] == len(errors)


def test_every_spelling_of_a_local_store_is_one_index_entry(tmp_path: Path, monkeypatch) -> None:
    import shutil

    import duckdb

    shutil.copy(SAMPLE_STORE.parent / "langgraph.sqlite", tmp_path / "lg.sqlite")
    write_store(str(tmp_path / "s"), runs=1, steps=2)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "h"
    for url in ("s", f"{tmp_path}/s/", f"file://{tmp_path}/s", "file://s", "lg.sqlite", "sqlite:///lg.sqlite",
                f"sqlite:///{tmp_path}/lg.sqlite?mode=ro", f"file://localhost{tmp_path}/lg.sqlite"):
        assert lastgood_cli("ls", url, home=home).returncode == 0, url
    with duckdb.connect(str(home / "index.duckdb"), read_only=True) as con:
        urls = sorted(r[0] for r in con.execute("SELECT url FROM stores").fetchall())
    assert urls == [str(tmp_path / "lg.sqlite"), str(tmp_path / "s")]


@pytest.mark.parametrize("args, message", [
    (("ls", "--run", "no-such-run"), "no run 'no-such-run' in this store"),
    (("runs", "--run", "no-such-run"), "no run 'no-such-run' in this store"),
    (("show", ""), "an empty checkpoint id: give an id or a unique prefix"),
    (("journal", "--run", "no-such-run"), "no run 'no-such-run' in this store"),
    (("diverge", "no-such-run", "trading-003"), "no run or checkpoint matches 'no-such-run'"),
    (("restore", "--last-good", "no-such-run", "--dry-run"), "no run 'no-such-run'")])
def test_a_name_the_store_does_not_have_is_said_plainly(args: tuple[str, ...], message: str,
                                                        sample_home: Path) -> None:
    done = lastgood_cli(args[0], str(SAMPLE_STORE), *args[1:], home=sample_home)
    assert done.returncode == 2 and done.stderr == f"lastgood: error: {message}" + (
        " (`lastgood runs STORE` lists them)" if "in this store" in message else "") + "\n"


def test_options_that_would_be_ignored_are_refused(sample_home: Path) -> None:
    done = lastgood_cli("verify", str(SAMPLE_STORE), "--scheduler", "tcp://127.0.0.1:1", home=sample_home)
    assert done.returncode == 2 and "--read-data" in done.stderr and done.stderr.count("\n") == 1
    done = lastgood_cli("journal", str(SAMPLE_STORE), "--action", "restores", home=sample_home)
    assert done.returncode == 2 and "invalid choice" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.parametrize("url, message", [
    ("postgresql://alice:s3cr@tpw@127.0.0.1:1/db", "write an '@' in a user name or password as %40"),
    ("postgresql://alice:pw@[::1:1/db", "not a valid postgresql:// URL"),
    ("http://[::1/x", "not a valid http:// URL")])
def test_a_malformed_url_is_one_line_and_no_piece_of_its_password(url: str, message: str, tmp_path: Path) -> None:
    done = lastgood_cli("ls", url, home=tmp_path / "h")
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1
    assert "tpw" not in done.stderr and "a bug" not in done.stderr


def test_runs_shows_superseded_checkpoints(tmp_path: Path) -> None:
    """Statuses that are not ok are counted on the run's line (every count is in the JSON)."""
    url = str(tmp_path / "s")
    write_store(url, runs=2, steps=6)
    home = tmp_path / "h"
    rows = json.loads(lastgood_cli("ls", url, "--run", "run-0", "--format", "json", home=home).stdout)
    rolled = lastgood_cli("rollback", url, "run-0", "--to", rows[2]["checkpoint_id"], "--reason", "t", "--yes",
                          home=home)
    assert rolled.returncode == 0, rolled.stderr
    done = lastgood_cli("runs", url, home=home, env={"COLUMNS": "100"})
    line = next(line for line in done.stdout.splitlines() if line.startswith("run-0"))
    assert done.returncode == 0 and "3 superseded" in line and all(len(l) <= 100 for l in done.stdout.splitlines())
    runs = json.loads(lastgood_cli("runs", url, "--format", "json", home=home).stdout)
    assert {r["run_id"]: r["superseded"] for r in runs} == {"run-0": 3, "run-1": 0}


def test_home_option_places_the_index(tmp_path: Path) -> None:
    write_store(str(tmp_path / "s"), runs=1, steps=2)
    elsewhere = tmp_path / "elsewhere"
    done = lastgood_cli("--home", str(elsewhere), "index", str(tmp_path / "s"), home=tmp_path / "h")
    assert done.returncode == 0, done.stderr
    assert (elsewhere / "index.duckdb").exists() and not (tmp_path / "h" / "index.duckdb").exists()


def test_index_is_incremental_through_the_cli(tmp_path: Path) -> None:
    write_store(str(tmp_path / "s"), runs=2, steps=3)
    first = json.loads(lastgood_cli("index", str(tmp_path / "s"), "--format", "json", home=tmp_path / "h").stdout)
    again = json.loads(lastgood_cli("index", str(tmp_path / "s"), "--format", "json", home=tmp_path / "h").stdout)
    assert (first["checkpoints_read"], first["checked"]) == (6, 6)
    assert (again["checkpoints_read"], again["checked"], again["changed"]) == (0, 0, False)
    assert again["overview"]["checkpoints"] == 6


def test_table_output_is_readable(sample_home: Path) -> None:
    done = lastgood_cli("ls", str(SAMPLE_STORE), "--status", "corrupt", home=sample_home)
    lines = done.stdout.splitlines()
    assert lines[0].split()[:6] == ["RUN", "STEP", "CREATED", "TRIGGER", "KIND", "STATUS"]
    assert lines[-1] == f"{len(lines) - 2} checkpoint(s)"
    assert all(" corrupt " in line for line in lines[1:-1])


def test_ls_fields_match_the_contract() -> None:
    assert set(queries.LS_FIELDS) == LS_KEYS
