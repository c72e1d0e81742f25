"""What Agno's ``SqliteDb`` and ``PostgresDb`` stores have in common, read the same way.

A dialect (``sqlite.py``, ``postgres.py``) keeps only its connection and its SQL: it lists the runs
(:mod:`lastgood.readers.agno.model`'s row shape, ``run_data`` parsed by the database), reads one
session's runs for a state (each run's messages and ``session_state`` snapshot) and one run's raw
``run_data``. Everything else lives here or in
:class:`lastgood.readers.common.sessions.SessionStoreReader` (the scan, the presence check, recovery,
which ADK's readers share).

The model: run = one session (``session_id``), namespace "", checkpoint = one run (``run_id``),
ordered by ``run_index`` as Agno's loader orders them; state = ``{"session_state": the run's
snapshot (``run_data.session_state``: the state at the end of that run), "messages": the
conversation of the session's runs up to it}``.

Schema 3.0 (``agno_schema_versions``: ``3.0.0``) keeps runs in ``agno_runs``. An Agno 2.x store kept
them as a JSON list in ``agno_sessions.runs``; the 3.0 migration copies them to ``agno_runs`` and may
leave the column. Runs found only in that column are listed too (``location`` ``legacy:<i>``,
metadata ``legacy_runs_column``; the table wins on a run id in both, as Agno's merge does), and
read-only: Agno would bring a removed run back from the column, so recovery refuses such sessions.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lastgood.checks import Check
from lastgood.errors import CheckpointNotFound, DecodeError
from lastgood.readers.agno import model
from lastgood.readers.base import CheckpointRecord, EventRecord, Finding
from lastgood.readers.common.sessions import SessionStoreReader

SESSION_COLUMNS = {"session_id", "session_type", "session_data"}
RUN_COLUMNS = {"run_id", "session_id", "run_data", "run_index", "status", "created_at"}


def is_agno_schema(schema: Mapping[str, Any] | None, sessions: str = "agno_sessions",
                   runs: str = "agno_runs") -> bool:
    """Agno's sessions table with its runs table (3.0), or with the legacy ``runs`` column (2.x)."""
    if not schema or not SESSION_COLUMNS <= set(schema.get(sessions) or ()):
        return False
    return RUN_COLUMNS <= set(schema.get(runs) or ()) or "runs" in set(schema.get(sessions) or ())


@dataclass
class RawListing:
    token: str
    full: bool
    rows: list[model.Row] | None  # None: nothing changed since the token
    orphans: set[str]


@dataclass(frozen=True)
class RunState:
    """One run as a state needs it."""

    run_id: str
    parent_run_id: str | None
    messages: Any
    session_state: Any
    valid: bool
    key: tuple[Any, ...] = ()  # Agno's order (model.order_key without the session)
    archived_by: str | None = None  # the Lastgood action that took it out of agno_runs
    unreadable: str | None = None  # why Agno's driver fails to read it (TEXT that is not UTF-8)


def context_of(runs: Sequence[RunState], target: RunState) -> list[RunState]:
    """The runs the session had up to ``target`` in Agno's order: the stored ones; for a run Lastgood
    archived, the stored runs before that action's batch, then the batch."""
    if target.archived_by is None:
        chain = [r for r in runs if r.archived_by is None]
    else:
        batch = [r for r in runs if r.archived_by == target.archived_by]
        start = min(r.key for r in batch)
        chain = [r for r in runs if r.archived_by is None and r.key < start] + batch
    chain.sort(key=lambda r: r.key)
    return chain[: chain.index(target) + 1]


class AgnoReader(SessionStoreReader):
    """The base of Agno session-store readers (see the module docstring)."""

    missing_message = "the run is no longer stored"

    # ---- what a dialect provides ---------------------------------------------------------
    @abstractmethod
    def _listing(self, since: str | None) -> RawListing:
        """Every run (full), the runs of the sessions changed since the token, or none."""

    @abstractmethod
    def _session_runs(self, session_id: str) -> list[RunState]:
        """The session's runs in Agno's order (table and legacy column merged)."""

    @abstractmethod
    def _run_data(self, session_id: str, run_id: str) -> bytes:
        """The raw ``run_data`` (CheckpointNotFound when the run is gone)."""

    @abstractmethod
    def _existing(self, ids: Sequence[str]) -> set[str]:
        """Which of these run ids are still stored."""

    # ---- listing -----------------------------------------------------------------------------
    def _list_rows(self, raw: RawListing) -> model.Listing:
        return model.list_rows(raw.rows or [], raw.orphans)

    def _events_table(self, events: Sequence[EventRecord]) -> Any:
        return model.events_table(events)

    # ---- one checkpoint ----------------------------------------------------------------------
    def load_state(self, record: CheckpointRecord) -> Any:
        """``{"session_state": the run's snapshot, "messages": the conversation up to it}``."""
        return self._state_in(record, self._session_runs(record.run_id))

    @staticmethod
    def _state_in(record: CheckpointRecord, runs: list[RunState]) -> Any:
        """The run's state among its session's ``runs``."""
        run = next((r for r in runs if r.run_id == record.checkpoint_id), None)
        if run is None:
            raise CheckpointNotFound(f"run {record.checkpoint_id} of session {record.run_id!r} not found")
        if run.unreadable:
            raise DecodeError(run.unreadable)
        if not run.valid:
            raise DecodeError("run_data is not a JSON object: Agno cannot load this run")
        state = run.session_state if isinstance(run.session_state, dict) else {}
        kept = [(r.parent_run_id, r.messages) for r in context_of(runs, run) if r.valid]
        return {"session_state": state, "messages": model.conversation(kept)}

    def read_blob(self, record: CheckpointRecord) -> bytes:
        return self._run_data(record.run_id, record.checkpoint_id)

    # ---- integrity --------------------------------------------------------------------------
    def _data_findings(self, record: CheckpointRecord, batch: dict[Any, Any]) -> Iterator[Finding]:
        """Every run's state loads (a session's runs read once a batch, not once per run)."""
        try:
            runs = batch.get(record.run_id)
            if runs is None:
                runs = batch[record.run_id] = self._session_runs(record.run_id)
            self._state_in(record, runs)
        except (DecodeError, CheckpointNotFound) as exc:
            yield Finding(getattr(exc, "check", Check.MISSING), "error", str(exc), record.run_id,
                          record.namespace, record.checkpoint_id)

    # ---- capabilities -------------------------------------------------------------------------
    def normalize_message(self, value: Any) -> dict[str, Any] | None:
        return model.normalize_message(value)
