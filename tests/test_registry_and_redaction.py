"""Reader selection from URLs, optional dependencies, credential stripping, secret redaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lastgood.errors import MissingDependency, ReaderError, StoreNotFound, UsageError
from lastgood.redact import MASK, redact, redact_text
from lastgood.readers.common.fsutil import open_fs
from lastgood.readers.registry import available_readers, display_url, load_reader_class, pick_reader
from tests.helpers import SAMPLE_STORE, write_store


def test_builtin_readers_are_registered_lazily() -> None:
    names = available_readers()
    assert {"native", "langgraph-sqlite", "langgraph-postgres"} <= set(names)
    assert load_reader_class("native").name == "native"


def test_reader_is_picked_from_the_stores_contents_never_its_name(tmp_path: Path) -> None:
    import shutil
    import sqlite3

    assert pick_reader(str(SAMPLE_STORE)) == "native"
    assert pick_reader(f"file://{SAMPLE_STORE}") == "native"
    langgraph = SAMPLE_STORE.parent / "langgraph.sqlite"
    assert pick_reader(str(langgraph)) == pick_reader(f"sqlite:///{langgraph}") == "langgraph-sqlite"
    renamed = tmp_path / "checkpoints.data"  # no telling suffix: the tables decide
    shutil.copy(langgraph, renamed)
    assert pick_reader(str(renamed)) == "langgraph-sqlite"
    other = tmp_path / "graph.sqlite"  # a telling name, but not LangGraph's tables
    sqlite3.connect(other).execute("CREATE TABLE notes (x)").connection.close()
    with pytest.raises(ReaderError, match="SQLite database with notes"):
        pick_reader(str(other))
    with pytest.raises(StoreNotFound):
        pick_reader("sqlite:///nowhere/x.db")
    url = "memory://registry-test/store"
    write_store(url, runs=1, steps=1)
    assert pick_reader(url) == "native"


@pytest.mark.postgres
def test_a_postgres_url_is_picked_by_its_tables(pg_dsn: str, pg_create_database: Any) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    dsn = pg_create_database("pick")
    with pytest.raises(ReaderError, match="PostgreSQL database with no tables"):
        pick_reader(dsn)
    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()
    from lastgood.readers.common import postgres

    postgres._schemas.clear()  # the short cache of the empty database's tables
    assert pick_reader(dsn) == "langgraph-postgres"
    with pytest.raises(StoreNotFound, match="cannot connect"):
        pick_reader("postgresql://u:p@127.0.0.1:9/db")


def test_unknown_inputs_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound):
        pick_reader(str(tmp_path / "missing"))
    with pytest.raises(ReaderError, match="no reader recognises"):
        pick_reader(str(tmp_path))
    with pytest.raises(UsageError, match="unknown reader"):
        load_reader_class("nope")


def test_missing_backend_names_the_extra() -> None:
    with pytest.raises(MissingDependency, match=r"pip install 'lastgood\[gcs\]'"):
        open_fs("gs://bucket/path")


def test_credentials_are_stripped_from_urls() -> None:
    assert display_url("postgresql://admin:hunter2@db:5432/agents") == "postgresql://db:5432/agents"
    assert display_url("s3://bucket/prefix") == "s3://bucket/prefix"
    assert "hunter2" not in display_url("https://h/x?password=hunter2")


@pytest.mark.parametrize("text", [
    "key sk-proj-abcdefghijklmnopqrstuvwx here", "ghp_abcdefghijklmnopqrstuvwxyz012345",
    "Authorization: Bearer abcdefghijklmnop.qrstu", "AKIAABCDEFGHIJKLMNOP",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----",
])
def test_secret_shapes_are_masked(text: str) -> None:
    masked = redact_text(text)
    assert MASK in masked
    for secret in ("sk-proj-abc", "ghp_abc", "abcdefghijklmnop.qrstu", "AKIAABCD", "dozjgNry", "MIIEabc"):
        assert secret not in masked


def test_secret_names_are_masked_at_any_depth_and_counts_are_not() -> None:
    state = {"tools": {"api_key": "k1", "conn": {"password": "p", "token": "t", "dsn": "x"}},
             "llm": {"max_tokens": 4096, "usage": {"total_tokens": 12}},
             "history": [{"Authorization": "Basic abc"}], "note": "no secrets here"}
    out = redact(state)
    assert out["tools"]["api_key"] == MASK and out["tools"]["conn"] == {"password": MASK, "token": MASK, "dsn": MASK}
    assert out["llm"] == {"max_tokens": 4096, "usage": {"total_tokens": 12}}
    assert out["history"][0]["Authorization"] == MASK and out["note"] == "no secrets here"
    assert state["tools"]["api_key"] == "k1", "redact must not modify its input"


def test_everything_under_a_secret_name_is_masked_and_its_shape_kept() -> None:
    from lastgood.investigate.diff import diff_states
    from lastgood.investigate.diff_values import redact_value
    from lastgood.investigate.history import tracked_value

    state = {"auth": {"client_secret": {"v": "deep-secret-value", "n": None, "pin": 4321},
                      "secrets": ["s3cr3t-a", "s3cr3t-b"], "note": "plain"},
             "llm": {"token_usage": {"prompt_tokens": 3, "completion_tokens": 4}}}
    out = redact(state)
    assert out["auth"]["client_secret"] == {"v": MASK, "n": None, "pin": MASK}
    assert out["auth"]["secrets"] == [MASK, MASK] and out["auth"]["note"] == "plain"
    assert out["llm"]["token_usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
    assert redact_value(None, state) == out and redact_value("secrets", ["a", "b"]) == [MASK, MASK]
    changed = diff_states({"auth": {"secrets": ["old-value"]}}, {"auth": {"secrets": ["new-value"]}})
    assert "old-value" not in repr(changed.to_dict()) and "new-value" not in repr(changed.to_dict())
    deep = tracked_value(state, "/auth/client_secret/v")
    assert deep["value"] == MASK and deep["length"] is None
    assert tracked_value(state, "/auth/client_secret/pin")["number"] is None
    assert tracked_value(state, "/llm/token_usage/prompt_tokens")["number"] == 3.0


def test_secret_comparisons_in_text_are_masked() -> None:
    assert redact_text('/password == "p@ssw0rd-plain2"') == f'/password == "{MASK}"'
    assert redact_text("token != abc123") == f"token != {MASK}"
    assert redact_text("password=hunter2pass") == f"password={MASK}"


def test_an_exceptions_name_is_not_a_secret_assignment() -> None:
    assert redact_text("NoCredentialsError: Unable to locate credentials") == (
        "NoCredentialsError: Unable to locate credentials")
    assert redact_text("botocore.exceptions.TokenExpired: the token expired").endswith("the token expired")
    assert redact_text("Password: abc") == f"Password: {MASK}" and redact_text("InvalidToken: x") == f"InvalidToken: {MASK}"


def test_a_store_that_fails_to_open_keeps_no_secret(tmp_path: Path) -> None:
    from tests.helpers import lastgood_cli

    home = tmp_path / "h"
    for url in ("postgresql://alice:s3cretpw@127.0.0.1:1/db", "s3://no-such-bucket-lg/p?secret=abc123&token=tk999"):
        done = lastgood_cli("ls", url, home=home, env={"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""})
        assert done.returncode == 2 and "s3cretpw" not in done.stderr and "tk999" not in done.stderr
    kept = (home / "credentials.json").read_text() if (home / "credentials.json").exists() else ""
    assert "s3cretpw" not in kept and "abc123" not in kept and "tk999" not in kept


def test_json_output_turns_nan_into_strings() -> None:
    import json

    from lastgood.cli.output import dumps

    text = dumps({"loss": float("nan"), "grad": [float("inf"), 1.5], "ok": "yes"})
    assert json.loads(text) == {"loss": "nan", "grad": ["inf", 1.5], "ok": "yes"}


def test_a_dsn_password_never_reaches_a_message_whatever_it_holds() -> None:
    """An unencoded '/' or a space in the password (the attack pass: the DSN printed whole, and
    psycopg's 'unexpected spaces found in "<password>"' passed through)."""
    from lastgood.readers.common.postgres import one_line

    for password in ("pass/word", "hunt er2", "p@ss:w/rd"):
        url = f"postgresql://ops:{password}@db.internal:5432/agents"
        assert password not in display_url(url) and display_url(url) == "postgresql://db.internal:5432/agents"
        said = one_line(f'connection failed: unexpected spaces found in "{password}" for {url}', url)
        assert password not in said and "***" in said


def test_an_aws_secret_key_is_redacted_by_its_shape_alone() -> None:
    from lastgood.redact import redact

    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert secret not in str(redact({"note": f"use {secret} for the bucket"}))
    kept = "3f786850e387550fdab836ed7e6dc881de23001b 01a19902-b570-7d36-b2cb-56c80c5ef8bf"  # a sha1, a uuid
    assert redact({"note": kept}) == {"note": kept}
