"""The journal, read: ``lastgood journal`` and the Recovery page's table — every action, whether the
hash chain holds, entries lost from its end, and actions interrupted before they completed."""

from __future__ import annotations

from typing import Any

from lastgood.index.catalog import Catalog
from lastgood.index.store import OpenStore
from lastgood.recovery.plan import backend, journal_chain


# ---- the journal, read -----------------------------------------------------------------------


def journal_report(store: OpenStore, run_id: str | None = None, action: str | None = None,
                   catalog: Catalog | None = None) -> dict[str, Any]:
    """``{chain_ok, actions: [...]}`` (+ problems and interrupted actions); with the ``catalog``
    that indexed the store, entries lost from the journal's end are problems too."""
    writer = backend(store)
    entries = writer.journal_entries()
    chain = journal_chain(store, entries, catalog)
    shown = [e for e in entries if (run_id is None or e.get("run_id") == run_id)
             and (action is None or e.get("action") == action)]
    pending = writer.pending()
    from lastgood.redact import redact  # a reason typed by an operator may quote a secret

    return {"chain_ok": chain.ok, "entries": chain.entries, "problems": chain.problems,
            "actions": redact(shown), "pending": redact(pending)}
