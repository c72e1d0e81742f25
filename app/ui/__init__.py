"""Streamlit glue: the UI layer, the one package that imports both streamlit and the core.

This module is what every page shares, re-exported from the small modules that hold it:

- ``stores``: the store a page shows (StoreRef), the cached catalog and queries, opening a store;
- ``sidebar``: the store picker and the rest of the sidebar every page draws;
- ``pagerun``: stopping a page, errors shown instead of tracebacks, widgets remembered across pages;
- ``tables``: tables with UTC times and human sizes; ``escape``: store text shown literally.

One page's helpers, session keys and selection state live in that page's module: ``overview``,
``timeline`` (and ``checkpoint``, the checkpoint it shows), ``integrity``, ``diff`` (and
``history``, its views along a run), ``recovery``, ``storage``. Around the pages: ``server`` (each page run),
``webserver`` (Streamlit's server in ``lastgood ui``), ``navigation`` (the pages' files and
titles), ``progressive`` (parts drawn after the first screen).

Everything shown has been redacted (app.redact) and every URL is shown without credentials
(readers.registry.display_url). Modules of this package import each other, never this one.
"""

from __future__ import annotations

from lastgood.display import plotly_theme as lazy_plotly_theme
from lastgood.display.plotly_theme import warm_up as warm_up_plotly_pages

lazy_plotly_theme.install()  # before Streamlit's import: its Plotly theme waits for the first Plotly page

from lastgood.ui.escape import code, md_escape  # noqa: E402
from lastgood.ui.pagerun import guarded, remember, stop  # noqa: E402
from lastgood.ui.sidebar import store_picker  # noqa: E402
from lastgood.ui.stores import STORE_KEY, StoreRef, clear_query_caches, query, runs_frame  # noqa: E402
from lastgood.ui.tables import show_table  # noqa: E402

__all__ = [
    "STORE_KEY", "StoreRef", "clear_query_caches", "code", "guarded", "md_escape", "query",
    "remember", "runs_frame", "show_table", "stop", "store_picker", "warm_up_plotly_pages",
]
