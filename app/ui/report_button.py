"""The "Download report" button of the Timeline, Diff and Integrity pages: the same self-contained
HTML file ``lastgood report`` writes (lastgood.report.build_report), for the run or the pair of
checkpoints on screen, built only when the button is clicked."""

from __future__ import annotations

import re
from html import escape
from typing import Any

import streamlit as st

from lastgood.errors import LastgoodError
from lastgood.redact import redact_text
from lastgood.ui import links
from lastgood.ui.stores import StoreRef, cached_store, catalog

MIME = "text/html"


def render(ref: StoreRef, *, run: str | None = None, pair: tuple[str, str] | None = None,
           key: str = "report") -> None:
    """A "Download report" button: the store's report with ``run``'s timeline (or, without it, every
    run's health), its findings, the diff of ``pair`` (A, B of this store) and the actions taken."""
    st.download_button("Download report", data=_builder(ref, run, pair), file_name=file_name(run, pair),
                       mime=MIME, on_click="ignore", icon=":material/description:", key=f"{key}-download",
                       help="One self-contained HTML file for an incident ticket (as `lastgood report`): "
                            "timeline, findings, diff, actions taken; secrets redacted; opens offline")


def diff_pair(view: Any, ref: StoreRef, ref_b: StoreRef | None) -> tuple[str, str] | None:
    """The Diff page's A and B when both are in ``ref``'s store (a report covers one store)."""
    if ref_b is not None and ref_b.url != ref.url:
        return None
    return str(view.result["a"]["checkpoint_id"]), str(view.result["b"]["checkpoint_id"])


def file_name(run: str | None, pair: tuple[str, str] | None) -> str:
    """``lastgood-report-<run>[-diff-<a>-<b>].html`` (a secret-shaped run as its handle)."""
    parts = ["lastgood-report"]
    if run:
        parts.append(links.run_value(run))
    if pair:
        parts.append(f"diff-{_short(pair[0])}-{_short(pair[1])}")
    return re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip("-") + ".html"


def _short(checkpoint: str) -> str:
    return links.run_value(checkpoint).rsplit("/", 1)[-1][:13]


def _builder(ref: StoreRef, run: str | None, pair: tuple[str, str] | None) -> Any:
    """The report, built when clicked (outside the page's run: what it needs is resolved now)."""
    index = catalog(ref.index_path)
    try:
        store: Any = cached_store(ref.index_path, ref.url)
    except LastgoodError as exc:
        store = exc

    def build() -> bytes:
        from lastgood.report import build_report

        try:
            if isinstance(store, LastgoodError):
                raise store
            return build_report(index, store, run=run, diff=pair).encode("utf-8")
        except LastgoodError as exc:  # the file says why (never a half-built report)
            return (f"<!DOCTYPE html><meta charset=utf-8><title>Lastgood report</title>"
                    f"<p>The report could not be built: {escape(redact_text(str(exc)))}</p>").encode("utf-8")

    return build
