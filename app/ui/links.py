"""Every view is a link: a page's whole state in its URL (``st.query_params``).

Each page reads its link once on load (:func:`take`) and writes its state back on every run
(:func:`write`), so the address bar always holds the view on screen: copied and opened in another
browser, it reproduces the same store, run, checkpoint, filters, tab… One parameter name per idea
across pages (the constants below), one URL per page (:func:`page_url`).

Secrets never travel in a URL (a URL ends up in history, logs and Referer headers): a run or
checkpoint id that looks like a secret travels as its handle (``key:…``, lastgood.index.queries'
``run_handle`` / ``checkpoint_handle``, which every query and the checkpoint resolver accept) —
:func:`run_value` and :func:`checkpoint_params` choose; :func:`write` and :func:`page_url` drop any
other secret-shaped value rather than put it in the address bar.

The API, for every page's UI module:

- ``take(page, names)``: the link's values, on the run the link arrives in (a dict; empty on later
  runs and for URLs the session wrote itself) — call it at the top of the page, before its widgets
  and before ``ui.store_picker()``;
- ``write(page, params)``: the page's whole state into the URL (empty values dropped; written only
  when it changed), on every run once its widgets are drawn;
- ``not_a_link()``: a widget's ``on_change`` callback saying the URL its rerun brought is no link
  (tabs, pickers, filters, the Timeline's chart: every control of a page with a link calls it, since
  the browser may not have applied the newest address when the operator acted);
- ``merge(params)``: a few parameters set, the rest kept (the sidebar puts ``store`` and ``live``
  into every page's URL at the end of each run: a page need not write them);
- ``values(name)`` / ``value(name)``: a multi-valued / single parameter of the current URL;
- ``page_url(page, params)``: a relative URL (``"timeline?store=…"``) for a table's LinkColumn;
- ``checkpoint_params(run, checkpoint, namespace)`` / ``run_value(run)``: safe values for a link;
- ``inspect_url(store, run, checkpoint, namespace)`` / ``inspect(...)``: the Timeline landing on a
  problem with its run and checkpoint selected (a LinkColumn cell / a button's action).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NoReturn
from urllib.parse import urlencode

import streamlit as st

from lastgood.index.queries import checkpoint_handle, is_handle, run_handle
from lastgood.redact import redact_text
from lastgood.ui.navigation import page_path

# ---- parameter names (one per idea, across pages) ------------------------------------------

STORE = "store"  # the store's URL (credentials live in the credentials file, never here)
RUN = "run"  # a run id, or its handle when secret-shaped
CHECKPOINT = "checkpoint"  # a checkpoint id (or unique prefix)
NAMESPACE = "ns"  # a LangGraph namespace / OpenAI branch of that checkpoint ("" = the root)
KEY = "key"  # a secret-shaped checkpoint's handle (replaces run, checkpoint and ns)
AGENT = "agent"
STATUS = "status"  # a filter: statuses (multi-valued)
SINCE, UNTIL = "from", "to"  # a filter: a time range (ISO dates or times, UTC)
SEARCH = "q"  # the search box
AXIS = "axis"  # the Timeline's x axis: time | step
TAB = "tab"  # the selected tab (a slug: findings, journal, by-run…; lastgood.ui.tabs)
A, B, STORE_B = "a", "b", "store_b"  # the Diff page's pair (store_b: B in another store)
ACTION, TARGET, UNDO = "action", "target", "undo"  # the Recovery page's plan
SEVERITY, CHECK, DEPTH = "severity", "check", "depth"  # the Integrity page's filters
LIVE = "live"  # the auto-refresh interval (off, 5s, 30s, 1m): kept across pages by write()

SHARED = (LIVE,)  # kept in the URL by every page's write() unless the page sets it

# session-state keys
_SEEN = "lastgood_link_seen"  # per caller of take(): the URL it last took, or that was written since
_FRESH = "lastgood_link_fresh"  # per caller: a link that arrived in this run, not written over yet


# ---- safe values -------------------------------------------------------------------------


def is_secret_shaped(value: str) -> bool:
    """Whether the redactor would hide (part of) ``value``: it must not go into a URL."""
    return redact_text(value) != value


def run_value(run_id: str) -> str:
    """``run_id`` for a URL: itself, or its handle (``key:…``) when it looks like a secret."""
    return run_handle(run_id) if is_secret_shaped(run_id) and not is_handle(run_id) else run_id


def checkpoint_params(run_id: Any, checkpoint_id: Any, namespace: Any = "") -> dict[str, str]:
    """The parameters naming one checkpoint: ``run``, ``checkpoint`` (and ``ns`` in a namespace), or,
    when any of them is secret-shaped, ``run`` as its handle and ``key`` (the checkpoint's handle).
    Empty when the run or checkpoint is not a string (a bucket of a 1M-checkpoint chart)."""
    if not isinstance(run_id, str) or not isinstance(checkpoint_id, str):
        return {}
    namespace = namespace if isinstance(namespace, str) else ""
    if checkpoint_id.startswith("key:") and is_handle(checkpoint_id):
        return {RUN: run_value(run_id), KEY: checkpoint_id}
    if any(is_secret_shaped(v) for v in (run_id, checkpoint_id, namespace)):
        return {RUN: run_value(run_id), KEY: checkpoint_handle(run_id, namespace, checkpoint_id)}
    return {RUN: run_id, CHECKPOINT: checkpoint_id, **({NAMESPACE: namespace} if namespace else {})}


def clean(params: Mapping[str, Any]) -> dict[str, str | list[str]]:
    """``params`` as a URL holds them: empty values (None, "", [], False) dropped, numbers as text,
    lists kept (repeated parameters), secret-shaped values dropped (never in a URL)."""
    out: dict[str, str | list[str]] = {}
    for name, value in params.items():
        if isinstance(value, (list, tuple, set, frozenset)):
            items = [str(v) for v in value if v is not None and str(v) != ""]
            items = [v for v in items if not is_secret_shaped(v)]
            if items:
                out[name] = sorted(items) if isinstance(value, (set, frozenset)) else items
        elif value is not None and value is not False and str(value) != "":
            text = str(value)
            if not is_secret_shaped(text):
                out[name] = text
    return out


# ---- links to a page ---------------------------------------------------------------------


def page_url(page: str, params: Mapping[str, Any]) -> str:
    """A relative URL opening ``page`` (``"timeline"``, ``"diff"``…) with ``params``: for a
    table's LinkColumn cell (st.page_link and st.switch_page take ``query_params`` instead)."""
    return f"{page}?{urlencode(clean(params), doseq=True)}"


def inspect_params(store_url: str, run_id: Any, checkpoint_id: Any = None, namespace: Any = "") -> dict[str, str]:
    """The Timeline's parameters landing on a run (and one of its checkpoints), selected."""
    named = checkpoint_params(run_id, checkpoint_id, namespace)
    if not named and isinstance(run_id, str):
        named = {RUN: run_value(run_id)}
    return {STORE: store_url, **named} if named else {}


def inspect_url(store_url: str, run_id: Any, checkpoint_id: Any = None, namespace: Any = "") -> str | None:
    """A Timeline URL (relative, for a LinkColumn) opening this run and checkpoint selected; None
    when they cannot be named (an aggregated row)."""
    params = inspect_params(store_url, run_id, checkpoint_id, namespace)
    return page_url("timeline", params) if params else None


def inspect(store_url: str, run_id: str, checkpoint_id: str | None = None, namespace: str = "") -> NoReturn:
    """Open the Timeline on this run with this checkpoint selected (a button's action)."""
    st.switch_page(page_path("timeline"), query_params=inspect_params(store_url, run_id, checkpoint_id, namespace))


# ---- reading and writing the current page's link -----------------------------------------------


def value(name: str) -> str | None:
    """One parameter of the current URL (its last value when repeated), or None."""
    found = st.query_params.get_all(name)
    return found[-1] if found else None


def values(name: str) -> list[str]:
    """A multi-valued parameter of the current URL (``?status=corrupt&status=incomplete``); a
    single value holding commas is split too (``?status=corrupt,incomplete``)."""
    return [part for v in st.query_params.get_all(name) for part in v.split(",") if part]


def _current() -> dict[str, tuple[str, ...]]:
    return {k: tuple(st.query_params.get_all(k)) for k in st.query_params}


def take(page: str, names: Iterable[str] = ()) -> dict[str, str]:
    """The link's parameters (``names``, or all when empty) on the run it arrives in, else ``{}``:
    a link sets the widgets once, and the operator's clicks win afterwards (a URL written through
    this module is never taken back). ``page`` names the caller (the page, or "sidebar" for
    ``store`` and ``live``): each takes a link once, in the run it arrives in or the run of its first
    visit while the URL still holds it. Call before the page's widgets are drawn; a multi-valued
    parameter: read :func:`values` once this returned something."""
    current = _current()
    seen, fresh = st.session_state.setdefault(_SEEN, {}), st.session_state.setdefault(_FRESH, {})
    if not current:
        seen[page] = current
        return {}
    if seen.get(page) != current:
        seen[page] = fresh[page] = current
    if fresh.get(page) != current:
        return {}
    wanted = set(names)
    return {k: v[-1] for k, v in current.items() if v and (not wanted or k in wanted)}


def not_a_link() -> None:
    """A widget's callback (``on_change``): the operator acted on the page, so the address this
    rerun brought is no link to follow. It is the one the browser showed when clicked — under load
    not yet the newest the session wrote (a tab clicked before the URL of the previous click
    arrived): taken, it would put the previous view back. Every caller of :func:`take` has seen it;
    the page's :func:`write` puts its state back in the URL at the end of the run."""
    current = _current()
    seen = st.session_state.setdefault(_SEEN, {})
    for caller in seen:
        seen[caller] = current
    st.session_state[_FRESH] = {}


def write(page: str, params: Mapping[str, Any]) -> None:
    """Make the URL hold exactly the page's state ``params`` (cleaned: :func:`clean`) plus the shared
    parameters (:data:`SHARED`, e.g. the live interval), touching it only when it changes: the address
    bar follows every selection. Call once the page's widgets were drawn (with their values)."""
    wanted = clean(params)
    for name in SHARED:
        if name not in params and name in st.query_params:
            wanted[name] = st.query_params.get_all(name)[-1]
    st.session_state.setdefault(_SEEN, {}).setdefault(page, {})
    _set(wanted)


def merge(params: Mapping[str, Any]) -> None:
    """Set these parameters (an empty value removes one), keep the others: the sidebar's ``store``
    and ``live`` on every page, whichever way the page wrote the rest. A URL changed this run by
    other means than this module (a page switch's parameters, a page writing ``st.query_params``
    itself) is left as it is: what it holds is taken as a link on the next run."""
    current = _current()
    if current and current not in st.session_state.get(_SEEN, {}).values():
        return
    wanted: dict[str, str | list[str]] = {k: list(v) if len(v) > 1 else v[0] for k, v in _current().items() if v}
    for name in params:
        wanted.pop(name, None)
    wanted.update(clean(params))
    _set(wanted)


def _set(wanted: dict[str, str | list[str]]) -> None:
    as_tuples = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in wanted.items()}
    seen = st.session_state.setdefault(_SEEN, {})
    for caller in seen:  # every caller has seen what was written: none takes it back
        seen[caller] = as_tuples
    st.session_state[_FRESH] = {}
    if _current() != as_tuples:
        st.query_params.from_dict(wanted)
