"""Store text shown literally: in markdown (no links, images, LaTeX, HTML) or as a code span."""

from __future__ import annotations

import re
from typing import Any

from lastgood.cli.output import escape_controls


def md_escape(text: str) -> str:
    """``text`` from a store shown literally in markdown (no links, images, LaTeX, HTML)."""
    text = _MD_ALWAYS.sub(r"\\\1", escape_controls(str(text)))
    text = _MD_SHORTCODE.sub(r"\\:", text)  # :emoji:, :material/icon:, :red[…] directives
    text = _MD_AUTOLINK.sub(lambda m: m.group(0).replace(":", "\\:").replace(".", "\\."), text)
    return _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), text)


_MD_ALWAYS = re.compile(r"([\\`*_{}\[\]<>|~$!&])")
_MD_SHORTCODE = re.compile(r":(?=[A-Za-z])")
_MD_AUTOLINK = re.compile(r"(?i)\b(https?|ftp)://|\bwww\.")
_MD_LINE_START = re.compile(r"^(\d*)([#+\-=.)])")  # headings, lists, rules


def literal_lines(text: str) -> str:
    """Multi-line store text (a chat message) literally, its line breaks kept."""
    return "  \n".join(md_escape(line) for line in str(text).split("\n"))


def code(text: Any) -> str:
    """``text`` from a store as a literal code span (no backtick or line break can end it)."""
    return f"`{escape_controls(str(text)).replace('`', chr(39))}`"
