"""The dashboard's pages, one Streamlit script per file (shipped inside the package as ``lastgood.pages``)."""

from pathlib import Path

PAGES_DIR = Path(__file__).resolve().parent


def page_path(name: str) -> str:
    """The absolute path of page ``name`` (e.g. ``"timeline"``), valid for editable and wheel installs."""
    return str(PAGES_DIR / f"{name}.py")
