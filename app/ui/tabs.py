"""Tabs that are part of the page's link: ``?tab=findings`` opens the checkpoint view on its
Findings tab, and clicking a tab puts it in the URL (lastgood.ui.links).

A tab has a slug, stable across runs and releases (``findings``), and a label that may carry a count
(``Findings (3)``): the URL holds the slug, so a link still opens the same tab when the count has
changed, and the tab stays selected while the operator picks another checkpoint or a live refresh
changes its count. The first tab is the default and is left out of the URL (as the Timeline leaves
out ``axis=time``).

A page with tabs (one group of tabs per page):

- ``take(group, slug)`` when its link arrives (from the page's ``take_link``; None: the first tab);
- ``selected(group)`` for its ``links.write`` (the slug, None for the first tab);
- ``linked_tabs(group, [(slug, label), …])`` instead of ``st.tabs(labels)``.

The tabs are stateful (Streamlit's ``on_change``): a click reruns the page, which writes the URL. The
click's rerun carries the address the browser showed, which under load may be an older one the
session wrote: the callback says it is no link (:func:`lastgood.ui.links.not_a_link`), so it never
puts the previous view back (as the sidebar's store picker does with ``CHOSEN_KEY``). Every tab's body
is still drawn on every run: stateful tabs let a page skip hidden ones (``TabContainer.open``), but
their content would then reach the browser only after a click and its rerun, and what reads it
without clicking (the page tests, a find-in-page) would not see it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from lastgood.ui import links

CHECKPOINT = "checkpoint"  # the checkpoint view's tabs (the Timeline)
RECOVERY = "recovery"  # Action / Journal
STORAGE = "storage"  # where the bytes are

# session-state keys, per group
_SLUG = "{group}_tab"  # the chosen tab's slug (None: the first tab)
_DRAWN = "{group}_tab_drawn"  # (the label drawn last, {label: slug or None for the first})


def widget_key(group: str) -> str:
    """st.tabs' key: the label of the tab shown (``st.session_state[widget_key(group)]``)."""
    return f"{group}_tabs"


def take(group: str, slug: str | None) -> None:
    """A link's tab (None or missing: the first), set on the run the link arrives in."""
    st.session_state[_SLUG.format(group=group)] = slug or None


def selected(group: str) -> str | None:
    """The slug of the tab the operator is on (None: the first tab): for the page's link. A tab
    clicked since the tabs were last drawn (or set through ``st.session_state``) counts already,
    so a page that writes its link before drawing its tabs writes the click's tab."""
    state = st.session_state
    slug_key, drawn_key = _SLUG.format(group=group), _DRAWN.format(group=group)
    drawn, shown = state.get(drawn_key), state.get(widget_key(group))
    if drawn and shown != drawn[0] and shown in drawn[1]:
        state[slug_key] = drawn[1][shown]
        state[drawn_key] = (shown, drawn[1])
    return state.get(slug_key)


def linked_tabs(group: str, tabs: Sequence[tuple[str, str]]) -> Sequence[Any]:
    """``st.tabs`` of these ``(slug, label)`` pairs, the chosen one selected; every body is drawn."""
    slugs, labels = [slug for slug, _ in tabs], [label for _, label in tabs]
    slug = selected(group)
    if slug is not None and (slug not in slugs or slug == slugs[0]):  # the first tab, or another group's
        slug = _forget(group)  # slug (a training checkpoint's on an agent's): the first, left out of the URL
    label = labels[slugs.index(slug)] if slug is not None else labels[0]
    st.session_state[widget_key(group)] = label  # the widget's id follows its labels (counts): keep the tab
    st.session_state[_DRAWN.format(group=group)] = (label, {lab: (s if i else None) for i, (s, lab) in enumerate(tabs)})
    return st.tabs(labels, key=widget_key(group), on_change=links.not_a_link)


def _forget(group: str) -> None:
    """No tab chosen any more; the URL (written before the tabs were drawn) follows at once."""
    st.session_state[_SLUG.format(group=group)] = None
    if links.value(links.TAB) is not None:
        links.merge({links.TAB: None})
