"""A store's numbers, ids and counts in words: one wording for every page (no streamlit).

The numbers are ``lastgood.index.queries.overview``'s, counted the way ``lastgood verify`` and
``lastgood runs`` count them; the pages only say them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lastgood.index.queries import Overview

SHORT_ID = 13  # characters of an id shown for it (a unique prefix names it, like git)
IRREGULAR = {"entry": "entries", "was": "were", "has": "have", "is": "are", "does": "do"}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 entry``, ``3 entries``, ``0 checkpoints`` (numbers with thousands separators)."""
    return f"{n:,} {word if n == 1 else many or IRREGULAR.get(word) or word + 's'}"


def short_id(value: Any) -> str:
    """An id as pages name it in text: its first SHORT_ID characters and an ellipsis when longer."""
    text = "" if value is None else str(value)
    return text if len(text) <= SHORT_ID + 1 else text[:SHORT_ID] + "…"


def health_line(o: Overview) -> str:
    """The store's health in one line, as the Overview, the Integrity page and the sidebar say it."""
    errors, warnings = o.findings.get("error", 0), o.findings.get("warning", 0)
    on_store = sum(1 for f in o.store_findings if f.get("severity") == "error")
    about = f" ({on_store:,} about the store itself)" if on_store else ""
    return (f"{o.damaged_runs:,} of {plural(o.runs, 'run')} damaged · {plural(o.damaged, 'damaged checkpoint')} · "
            f"{plural(errors, 'error')}{about} · {plural(warnings, 'warning')}")


def check_progress(depth: str, done: int, total: int | None, checkpoints: int, only_unverified: bool,
                   running: bool) -> str:
    """What a background check has checked so far, out of the store's checkpoints: ``data checked:
    1,200 of 2,386 checkpoints; counts will change`` (a check of the never-read ones only starts
    from those already read)."""
    what = "data" if depth == "data" else "structure"
    before = max(checkpoints - (total or 0), 0) if only_unverified else 0
    checked = min(before + done, checkpoints) if total is not None else before
    if running and checkpoints and checked >= checkpoints:  # every one read: its findings being recorded
        return f"{what} checked: {checked:,} of {plural(checkpoints, 'checkpoint')}; recording the results, " \
               "counts will change"
    if running:
        return f"{what} checked: {checked:,} of {plural(checkpoints, 'checkpoint')}; counts will change"
    return f"{what} checked: {checked:,} of {plural(checkpoints, 'checkpoint')}"
