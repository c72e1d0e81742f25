"""The dashboard's pages: their files, titles and icons (the router and every link use these).

The page scripts ship inside the package as ``lastgood.pages`` (see pyproject's ``package-dir``);
their folder is found without importing them (a page imports ``lastgood.ui``, never the reverse).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import NamedTuple


class PageEntry(NamedTuple):
    name: str
    title: str
    icon: str


PAGES = (
    PageEntry("overview", "Overview", ":material/dashboard:"),
    PageEntry("timeline", "Timeline", ":material/timeline:"),
    PageEntry("integrity", "Integrity", ":material/verified_user:"),
    PageEntry("diff", "Diff", ":material/difference:"),
    PageEntry("recovery", "Recovery", ":material/restore:"),
    PageEntry("storage", "Storage", ":material/storage:"),
    PageEntry("sql", "SQL", ":material/database:"),
)


@functools.cache
def pages_dir() -> Path:
    spec = importlib.util.find_spec("lastgood.pages")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the lastgood.pages folder is missing from this installation")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def page_path(name: str) -> str:
    """The absolute path of page ``name`` (e.g. ``"timeline"``), valid for editable and wheel installs."""
    return str(pages_dir() / f"{name}.py")
