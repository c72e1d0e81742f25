"""Integrity findings shared by the LangGraph readers (SQLite and Postgres).

Each function turns one decoded (or undecodable) payload into findings with a
reason; nothing here raises for damaged data or executes anything.
"""

from __future__ import annotations

from lastgood.checks import Check
from collections.abc import Iterator
from typing import Any

from lastgood.readers.base import Finding
from lastgood.readers.langgraph.common import ERROR
from lastgood.errors import DecodeError
from lastgood.readers.langgraph.serde import (
    dangerous_types,
    decode_typed,
    is_known_type,
    pickle_globals,
    suspicious_types,
)

def codec_findings(type_: str | None, where: tuple[str, str, str], label: str = "checkpoint") -> Iterator[Finding]:
    if not is_known_type(type_):
        yield Finding(Check.UNKNOWN_CODEC, "error", f"{label}: unknown serialization type {type_!r}", *where)


def pickle_finding(label: str, data: bytes, where: tuple[str, str, str], type_: str) -> Finding:
    if "+" in type_:
        return Finding(Check.PICKLE_PAYLOAD, "error", f"{label}: encrypted pickle payload ({type_}); not loaded", *where)
    found, problem = pickle_globals(data)
    damage = f"; the pickle is damaged ({problem})" if problem else ""
    names = ", ".join(found) or "none"
    return Finding(Check.PICKLE_PAYLOAD, "error",
                   f"{label}: pickle payload (not loaded) would import: {names}{damage}", *where)


def value_findings(
    label: str, value: Any, where: tuple[str, str, str], expected_id: str | None, channel: str | None
) -> Iterator[Finding]:
    if isinstance(value, dict) and "$encrypted" in value:
        yield Finding(Check.ENCRYPTED, "info", f"{label}: encrypted ({value['$encrypted']}); set LANGGRAPH_AES_KEY to read it", *where)
        return
    if isinstance(value, dict) and value.get("$unloaded") == "pickle":
        yield Finding(Check.PICKLE_PAYLOAD, "error", f"{label}: encrypted pickle payload would import: {', '.join(value['globals'])}", *where)
        return
    if names := suspicious_types(value):
        severity = "error" if dangerous_types(value) else "warning"
        yield Finding(Check.SUSPICIOUS_TYPE, severity,
                      f"{label} names types LangGraph would import and call: {', '.join(names)}", *where)
    if expected_id is not None:
        yield from structure_findings(label, value, where, expected_id)
    if channel == ERROR:
        yield Finding(Check.PENDING_ERROR, "warning", f"{label}: a task failed: {value}", *where)


def structure_findings(label: str, value: Any, where: tuple[str, str, str], expected_id: str) -> Iterator[Finding]:
    if not isinstance(value, dict) or not isinstance(value.get("channel_values"), dict):
        yield Finding(Check.UNDECODABLE, "error", f"{label}: decoded, but it is not a LangGraph checkpoint (no channel_values)", *where)
    elif value.get("id") not in (None, expected_id):
        yield Finding(Check.ID_MISMATCH, "warning", f"{label}: the blob says id {value.get('id')}, the row {expected_id}", *where)



def payload_findings(label: str, type_: str | None, blob: bytes | None, where: tuple[str, str, str],
                     aes_key: bytes | None, expected_id: str | None = None,
                     channel: str | None = None) -> Iterator[Finding]:
    """Findings for one typed payload: codec, pickle (never loaded), decoding, contents."""
    if not is_known_type(type_):
        yield from codec_findings(type_, where, label)
        return
    if type_ == "pickle" or ((type_ or "").startswith("pickle+") and aes_key is None):
        yield pickle_finding(label, blob or b"", where, type_ or "")
        return
    try:
        value = decode_typed(type_, blob, aes_key=aes_key)
    except DecodeError as exc:
        yield Finding(Check.UNDECODABLE, "error", f"{label}: {exc}", *where)
        return
    yield from value_findings(label, value, where, expected_id, channel)


def pending_error_finding(label: str, type_: str | None, blob: bytes | None, where: tuple[str, str, str],
                          aes_key: bytes | None) -> Finding:
    """The ``pending-error`` warning for one ``__error__`` write (never loads a pickle)."""
    try:
        value: Any = decode_typed(type_, blob, aes_key=aes_key)
    except DecodeError as exc:
        value = f"(undecodable {ERROR} write: {exc})"
    return Finding(Check.PENDING_ERROR, "warning", f"{label}: a task failed: {value}", *where)
