"""The Timeline's search box and its hits, and the runs waiting on a human: lists whose every entry
opens what it names (through the ``open_hit`` the page passes: select that run, and checkpoint).

Search (lastgood.index.lanes.search, SQL over the index): a run id, a checkpoint id or prefix, an
agent, or metadata ``key=value`` (``a.b=value`` for a nested key). Everything shown is redacted by
the query and escaped here (store text never becomes a link).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import streamlit as st

from lastgood.display.figures import compact, utc
from lastgood.index.lanes import SEARCH_LIMIT
from lastgood.ui.escape import literal_lines, md_escape
from lastgood.ui.pagerun import guarded
from lastgood.ui.stores import StoreRef, query

if TYPE_CHECKING:
    import pandas as pd

HITS_SHOWN = 10
WAITING_SHOWN = 20
WAITING_LIMIT = 10 * WAITING_SHOWN  # runs the query returns (counted; the longest waiting shown)
OpenHit = Callable[[dict[str, Any]], None]

# session-state keys
SEARCH = "tl_search"  # the search box


def search_box(ref: StoreRef, open_hit: OpenHit) -> str:
    """The search box and, when it holds a query, its hits as buttons; returns the query."""
    text = (st.text_input("Search", key=SEARCH, icon=":material/search:",
                          placeholder="run id, checkpoint id or prefix, agent, or metadata key=value "
                                      "(e.g. source=fork)") or "").strip()
    if text:
        render_hits(hits(ref, text), open_hit)
    return text


def hits(ref: StoreRef, text: str) -> pd.DataFrame:
    with guarded():
        return query(ref, "search", text, SEARCH_LIMIT)


def render_hits(found: pd.DataFrame, open_hit: OpenHit) -> None:
    if found.empty:
        st.caption("Nothing matches: try a prefix of a run or checkpoint id, an agent, or `key=value`.")
        return
    more = f", the first {HITS_SHOWN} shown: refine to see the others" if len(found) > HITS_SHOWN else ""
    st.caption(f"{len(found):,}{'+' if len(found) >= SEARCH_LIMIT else ''} match(es){more}")
    box = st.container(border=True)
    for i, hit in enumerate(found.head(HITS_SHOWN).to_dict("records")):
        box.button(hit_label(hit), key=f"tl_hit_{i}", type="tertiary", icon=_ICONS.get(hit["hit"]),
                   on_click=open_hit, args=(hit,))


_ICONS = {"run": ":material/timeline:", "agent": ":material/smart_toy:", "checkpoint": ":material/location_on:",
          "metadata": ":material/data_object:"}


def hit_label(hit: dict[str, Any]) -> str:
    """One line per hit (store text escaped: a button's label is markdown)."""
    where = md_escape(hit["run_id"]) + (f" · {md_escape(hit['namespace'])}" if hit.get("namespace") else "")
    if hit["hit"] in ("run", "agent"):
        return (f"run **{where}** · {md_escape(hit.get('agent') or '-')} · "
                f"{compact(int(hit.get('checkpoints') or 0))} checkpoint(s) · {hit['status']} · last {utc(hit['created_at'])}")
    return (f"checkpoint {md_escape(str(hit['checkpoint_id']))} in **{where}** · {hit['status']} · "
            f"{utc(hit['created_at'])}" + (" · metadata match" if hit["hit"] == "metadata" else ""))


# ---- runs waiting on a human --------------------------------------------------------------------


def waiting(ref: StoreRef) -> pd.DataFrame:
    with guarded():
        return query(ref, "waiting_runs", WAITING_LIMIT)


def render_waiting(found: pd.DataFrame, open_hit: OpenHit) -> None:
    """Each run whose newest interrupt was not answered: the question, how long ago, an Open button."""
    if found.empty:
        return
    with st.expander(f":material/pause_circle: {len(found):,} run(s) waiting on a human", expanded=True):
        for i, row in enumerate(found.head(WAITING_SHOWN).to_dict("records")):
            text, button = st.columns([6, 1], vertical_alignment="center")
            text.markdown(f"**{md_escape(row['run_id'])}**" + (f" · {md_escape(row['namespace'])}" if row["namespace"]
                                                              else "")
                          + (f" · {md_escape(row['agent'])}" if row.get("agent") else "")
                          + f" · asked {utc(row['asked_at'])} UTC  \n"
                          + literal_lines(_question(row.get("question"))))
            button.button("Open", key=f"tl_waiting_{i}", icon=":material/open_in_new:", type="tertiary",
                          on_click=open_hit, args=({**row, "hit": "checkpoint"},))
        if len(found) > WAITING_SHOWN:
            st.caption(f"…and {len(found) - WAITING_SHOWN:,} more, the longest waiting shown first.")


def _question(message: Any) -> str:
    """The question an interrupt asked: its ``question``/``message`` field when it is JSON."""
    import json

    text = str(message or "(no message recorded)")
    try:
        value = json.loads(text)
    except ValueError:
        return text[:400]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]
    if isinstance(value, dict):
        for key in ("question", "message", "prompt", "text", "value"):
            if isinstance(value.get(key), str):
                return value[key][:400]
    return text[:400]
