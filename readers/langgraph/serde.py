"""Safe decoding of LangGraph typed payloads (``(type, bytes)``) into plain data.

LangGraph's own ``JsonPlusSerializer`` imports and calls the class named in
every msgpack extension and legacy JSON constructor, and unpickles ``pickle``
payloads: reading an untrusted store with it can run code. This module never
imports anything named in data and never unpickles:

- msgpack extension payloads become tagged plain dicts, e.g.
  ``{"$type": "langchain_core.messages.ai.AIMessage", "content": ..., ...}``,
  ``{"$type": "uuid.UUID", "value": "…"}``, ``{"$type": "datetime.datetime",
  "$method": "fromisoformat", "value": "…"}``; numpy arrays are summarised
  (dtype, shape, size) without being built;
- legacy ``json`` constructors (``{"lc": 1|2, "type": "constructor", ...}``)
  become the same tagged dicts;
- ``pickle`` payloads are only walked with ``pickletools.genops`` to list the
  globals they would import (lastgood.readers.common.pickle_scan);
- ``msgpack+aes`` is decrypted only when a key is given.

Nested ``bytes`` values inside msgpack data stay ``bytes``; a top-level
``bytes``/``bytearray`` payload is summarised as ``{"$bytes": n, "sha256": …}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import repeat
from typing import Any

import msgpack

from lastgood.checks import Check
from lastgood.errors import DecodeError, MissingDependency, ReaderError
from lastgood.readers.langgraph.messages import (  # noqa: F401 - the message helpers are re-exported
    _LANGCHAIN_PREFIXES,
    DELTA_SNAPSHOT_TYPE,
    MESSAGE_ROLES,
    SHARED,
    is_internal_channel,
    message_role,
    normalize_message,
    normalize_state,
    normalize_value,
)
from lastgood.readers.common.pickle_scan import decode_pickle, pickle_globals  # noqa: F401 - pickle_globals re-exported

AES_KEY_ENV = "LANGGRAPH_AES_KEY"
NUMPY_TYPE = "numpy.ndarray"
KNOWN_TYPES = frozenset({"null", "empty", "bytes", "bytearray", "msgpack", "json", "pickle"})
KNOWN_CIPHERS = frozenset({"aes"})

# msgpack extension codes written by langgraph.checkpoint.serde.jsonplus
EXT_CONSTRUCTOR_SINGLE_ARG = 0
EXT_CONSTRUCTOR_POS_ARGS = 1
EXT_CONSTRUCTOR_KW_ARGS = 2
EXT_METHOD_SINGLE_ARG = 3
EXT_PYDANTIC_V1 = 4
EXT_PYDANTIC_V2 = 5
EXT_NUMPY_ARRAY = 6
EXT_DELTA_SNAPSHOT = 7
MAX_EXT_DEPTH = 32  # deeper nesting would overflow the C stack (msgpack recurses natively)


class _Depth(threading.local):
    value = 0  # extension payloads being unpacked, in this thread


_EXT_DEPTH = _Depth()

# LangGraph's SAFE_MSGPACK_TYPES (langgraph.checkpoint.serde._msgpack), as dotted paths.
SAFE_TYPES = frozenset(
    {
        "datetime.datetime", "datetime.date", "datetime.time", "datetime.timedelta",
        "datetime.timezone", "uuid.UUID", "decimal.Decimal", "builtins.set",
        "builtins.frozenset", "collections.deque", "ipaddress.IPv4Address",
        "ipaddress.IPv4Interface", "ipaddress.IPv4Network", "ipaddress.IPv6Address",
        "ipaddress.IPv6Interface", "ipaddress.IPv6Network", "pathlib.Path",
        "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib._local.Path",
        "pathlib._local.PosixPath", "pathlib._local.WindowsPath", "zoneinfo.ZoneInfo",
        "re.compile", "langchain_core.documents.base.Document", "langgraph.types.Send",
        "langgraph.types.TimeoutPolicy", "langgraph.types.Interrupt", "langgraph.types.Command",
        "langgraph.types.StateSnapshot", "langgraph.types.PregelTask", "langgraph.types.Overwrite",
        "langgraph.store.base.Item", "langgraph.store.base.GetOp", NUMPY_TYPE, DELTA_SNAPSHOT_TYPE,
    }
)
SAFE_METHODS = frozenset({("datetime.datetime", "fromisoformat")})

# top-level modules whose names in a payload mean "this would run code"
DANGEROUS_MODULES = frozenset(
    {
        "os", "posix", "nt", "subprocess", "sys", "builtins", "__builtin__", "importlib",
        "pickle", "_pickle", "marshal", "shutil", "socket", "ctypes", "code", "codeop",
        "runpy", "pty", "webbrowser", "shelve", "types", "functools", "operator", "pydoc",
        "commands", "platform", "multiprocessing", "asyncio", "signal", "tempfile",
        "urllib", "http", "requests", "httpx", "telnetlib", "ftplib", "smtplib", "eval",
        "exec", "dill", "cloudpickle", "torch", "numpy.lib", "yaml", "jinja2",
    }
)


def decode_typed(type_: str | None, data: bytes | None, *, aes_key: bytes | None = None) -> Any:
    """Plain data from one LangGraph ``(type, bytes)`` pair; never runs code.

    Raises DecodeError (with the cause) for an unknown type or undecodable bytes.
    """
    payload = _as_bytes(data)
    if type_ is not None and not isinstance(type_, str):
        raise DecodeError(f"serialization type stored as {type(type_).__name__}, not text",
                          Check.UNKNOWN_CODEC)
    if type_ is None:
        if not payload:
            return None
        raise DecodeError(f"no serialization type for {len(payload)} bytes")
    if "+" in type_:
        return _decode_encrypted(type_, payload, aes_key)
    decoder = _DECODERS.get(type_)
    if decoder is None:
        raise DecodeError(f"unknown serialization type {str(type_)[:40]!r}", Check.UNKNOWN_CODEC)
    if type_ == "msgpack":
        value = _fast_msgpack(payload)
        if value is not _EXACT:
            return value
    return _bounded(decoder(payload), len(payload))


_EXACT = object()  # the fast decode cannot answer: take the exact path
_PLAIN_KEY_TYPES = frozenset((str, int, float, bool, type(None)))


def _fast_msgpack(payload: bytes) -> Any:
    """``decode_msgpack`` + ``_bounded`` when that is certain to give the same value: msgpack
    builds the maps in C (no ``_pairs_as_dict`` per map) and the bounds walk also collects
    the key types; only keys the exact path keeps as they are (text, numbers, booleans,
    None) count. Anything else — an error, a bound exceeded, a bytes or unhashable key —
    is ``_EXACT``, and the exact path decides (with its messages)."""
    from lastgood.readers.common import validate

    try:
        value = msgpack.unpackb(payload, **_FAST_OPTIONS)
    except Exception:  # noqa: BLE001 - the exact path names the problem
        return _EXACT
    keys: set[type] = set()
    try:
        validate.check_state(value, "value", len(payload), key_types=keys)
    except validate.Invalid:
        return _EXACT
    return value if keys <= _PLAIN_KEY_TYPES else _EXACT


def _bounded(value: Any, size: int) -> Any:
    """``value`` when it is within lastgood.limits (depth, size), else DecodeError."""
    from lastgood.readers.common import validate

    try:
        validate.check_state(value, "value", size)
    except validate.Invalid as exc:
        raise DecodeError(str(exc), exc.check) from None
    return value


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, (memoryview, bytearray)):
        return bytes(data)
    if isinstance(data, str):  # a TEXT column, or a driver that decoded it
        return data.encode("utf-8", "surrogatepass")
    if data is None or isinstance(data, bytes):
        return data or b""
    raise DecodeError(f"payload stored as {type(data).__name__}, not bytes")


def is_known_type(type_: str | None) -> bool:
    """True for a type LangGraph can write (``msgpack``, ``json``, ``msgpack+aes``…)."""
    if type_ is None:
        return True
    if not isinstance(type_, str):
        return False
    inner, _, cipher = type_.partition("+")
    return inner in KNOWN_TYPES and (not cipher or cipher in KNOWN_CIPHERS)


def bytes_summary(data: bytes) -> dict[str, Any]:
    return {"$bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


# --- msgpack -----------------------------------------------------------------


class _Problem(Exception):
    """Why msgpack data could not be decoded (inner message, no prefix)."""


def decode_msgpack(data: bytes) -> Any:
    """Decode LangGraph msgpack; extension types become tagged plain dicts."""
    try:
        return _unpack(data)
    except _Problem as exc:
        raise DecodeError(f"msgpack: {exc}") from None


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, **_UNPACK_OPTIONS)
    except (_Problem, DecodeError):
        raise
    except RecursionError:
        raise _Problem("nesting too deep") from None
    except Exception as exc:  # noqa: BLE001 - every msgpack failure becomes a DecodeError
        raise _Problem(_describe_failure(data, exc)) from None


def _describe_failure(data: bytes, exc: Exception) -> str:
    if isinstance(exc, msgpack.ExtraData):
        start = len(data) - len(exc.extra)
        return f"{len(exc.extra)} bytes of extra data after the value at byte {start}"
    if isinstance(exc, ValueError) and "incomplete input" in str(exc):
        return f"truncated data at byte {len(data)}"
    if isinstance(exc, ValueError) and "exceeds max_" in str(exc):  # a length longer than the data
        return f"truncated data at byte {len(data)} ({exc})"
    offset = _failure_offset(data)
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 in a string near byte {offset}"
    if isinstance(exc, msgpack.FormatError) and offset < len(data):
        return f"invalid byte 0x{data[offset]:02x} at byte {offset}"
    if isinstance(exc, msgpack.StackError):
        return "nesting too deep"
    detail = str(exc) or type(exc).__name__
    return f"{detail} near byte {offset}"


def _failure_offset(data: bytes) -> int:
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, ext_hook=_skip_ext, max_buffer_size=max(len(data), 1)
    )
    unpacker.feed(data)
    try:
        unpacker.unpack()
    except Exception:  # noqa: BLE001 - only the position matters here
        pass
    return unpacker.tell()


def _skip_ext(code: int, payload: bytes) -> None:
    return None


def _ext_hook(code: int, payload: bytes) -> Any:
    return _ext_value(code, payload, _unpack)


def _ext_hook_fast(code: int, payload: bytes) -> Any:
    memo = SHARED.ext
    if memo is None:
        return _ext_value(code, payload, _unpack_fast)
    key = (_EXT_DEPTH.value, code, payload)  # the depth bound depends on the position
    value = memo.get(key, _EXACT)
    if value is _EXACT:
        value = memo[key] = _ext_value(code, payload, _unpack_fast)
    return value


@contextmanager
def shared_decoding() -> Iterator[None]:
    """Within this block (in this thread), equal msgpack extension payloads decode to one
    object and a decoded message normalizes to one object, across every decode: two states
    of one thread share most of their messages, so a diff meets them as the same object and
    compares nothing (``x is y``), and the second state decodes only what the first did not
    hold. Values decoded within are shared: callers must not mutate them (the diff does not)."""
    if SHARED.ext is not None:  # nested: the outer block's memos serve
        yield
        return
    SHARED.ext, SHARED.messages = {}, {}
    try:
        yield
    finally:
        SHARED.ext = SHARED.messages = None


def _unpack_fast(data: bytes) -> Any:
    return msgpack.unpackb(data, **_FAST_OPTIONS)


def _ext_value(code: int, payload: bytes, unpack: Callable[[bytes], Any]) -> Any:
    if code == EXT_NUMPY_ARRAY:
        return _numpy_summary(payload)
    if not 0 <= code <= EXT_DELTA_SNAPSHOT:
        return {"$ext": code, **bytes_summary(payload)}
    depth = _EXT_DEPTH.value
    if depth >= MAX_EXT_DEPTH:  # each level recurses through msgpack's C unpacker
        raise _Problem(f"extension types nested deeper than {MAX_EXT_DEPTH} levels")
    _EXT_DEPTH.value = depth + 1
    try:
        inner = unpack(payload)
    except _Problem as exc:
        inner_problem = str(exc)
        if not inner_problem.startswith("ext type"):  # name the innermost extension only
            inner_problem = f"ext type {code} payload: {inner_problem}"
        raise _Problem(inner_problem) from None
    finally:
        _EXT_DEPTH.value = depth
    if code == EXT_DELTA_SNAPSHOT:
        return {"$type": DELTA_SNAPSHOT_TYPE, "value": inner}
    return _tag_constructor(code, inner)


def _tag_constructor(code: int, inner: Any) -> dict[str, Any]:
    if not (isinstance(inner, list) and len(inner) >= 3 and isinstance(inner[0], str) and inner[0]
            and isinstance(inner[1], str) and inner[1]):
        return {"$ext": code, "$malformed": "not (module, name, data)", "value": inner}
    type_name = f"{inner[0]}.{inner[1]}"
    arg = inner[2]
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        return {"$type": type_name, "value": _pretty_single(type_name, arg)}
    if code == EXT_CONSTRUCTOR_POS_ARGS:
        return {"$type": type_name, "args": arg}
    if code == EXT_METHOD_SINGLE_ARG:
        method = inner[3] if len(inner) > 3 else None
        return {"$type": type_name, "$method": method, "value": arg}
    return _with_fields(type_name, arg)


_STR_ONLY = frozenset((str,))


def _with_fields(type_name: str, fields: Any) -> dict[str, Any]:
    if isinstance(fields, dict) and set(map(type, fields)) <= _STR_ONLY \
            and not any(map(str.startswith, fields, repeat("$"))):
        return {"$type": type_name, **fields}
    return {"$type": type_name, "value": fields}


def _pretty_single(type_name: str, arg: Any) -> Any:
    if type_name == "uuid.UUID" and isinstance(arg, str) and len(arg) == 32:
        return f"{arg[:8]}-{arg[8:12]}-{arg[12:16]}-{arg[16:20]}-{arg[20:]}"
    return arg


def _numpy_summary(payload: bytes) -> dict[str, Any]:
    try:
        dtype, shape, order, buf = msgpack.unpackb(payload, raw=False, ext_hook=_skip_ext)
        size = 1
        for dim in shape:
            size *= int(dim)
    except Exception as exc:  # noqa: BLE001 - a damaged array summary is still shown
        return {"$type": NUMPY_TYPE, "$malformed": f"{type(exc).__name__}: {exc}", "nbytes": len(payload)}
    return {"$type": NUMPY_TYPE, "dtype": dtype, "shape": list(shape), "order": order,
            "size": size, "nbytes": len(buf) if isinstance(buf, (bytes, bytearray)) else None}


def _pairs_as_dict(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A msgpack map as a dict, whatever its keys: unhashable keys (lists, maps)
    become their JSON text and bytes keys their text, so they stay data."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if isinstance(key, (list, dict)):
            key = json.dumps(key, sort_keys=True, default=str)
        elif isinstance(key, (bytes, bytearray, memoryview)):
            key = bytes(key).decode("utf-8", "backslashreplace")
        elif not isinstance(key, (str, int, float, bool, type(None))):
            key = str(key)
        out[key] = value
    return out


_UNPACK_OPTIONS: dict[str, Any] = {
    "raw": False, "strict_map_key": False, "ext_hook": _ext_hook, "timestamp": 3,
    "object_pairs_hook": _pairs_as_dict,
}
_FAST_OPTIONS: dict[str, Any] = {"raw": False, "strict_map_key": False, "ext_hook": _ext_hook_fast, "timestamp": 3}


# --- legacy json -------------------------------------------------------------


def decode_json(data: bytes) -> Any:
    """Legacy LangChain/LangGraph JSON; ``lc`` constructors become tagged dicts."""
    try:
        return json.loads(data, object_hook=_lc_hook)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"json: {exc}") from None


def _lc_hook(obj: dict[str, Any]) -> Any:
    if obj.get("lc") not in (1, 2) or not isinstance(obj.get("id"), list):
        return obj
    path = ".".join(str(part) for part in obj["id"])
    kind = obj.get("type")
    if kind == "constructor":
        tagged = _with_fields(path, obj.get("kwargs") or {})
        if obj.get("args"):
            tagged["args"] = obj["args"]
        return tagged
    if kind == "secret":
        return {"$secret": path}
    if kind == "not_implemented":
        return {"$not_implemented": path, "repr": obj.get("repr")}
    return obj


# --- encryption --------------------------------------------------------------


def aes_key_from_env() -> bytes | None:
    """``LANGGRAPH_AES_KEY`` as bytes, like EncryptedSerializer.from_pycryptodome_aes."""
    key_str = os.getenv(AES_KEY_ENV)
    if not key_str:
        return None
    key = key_str.encode()
    if len(key) not in (16, 24, 32):
        raise ReaderError(f"{AES_KEY_ENV} must be 16, 24, or 32 bytes long (got {len(key)})")
    return key


def _decode_encrypted(type_: str, data: bytes, aes_key: bytes | None) -> Any:
    inner, _, cipher = type_.partition("+")
    if inner not in KNOWN_TYPES or cipher not in KNOWN_CIPHERS:
        raise DecodeError(f"unknown serialization type {type_!r}", Check.UNKNOWN_CODEC)
    if aes_key is None:
        return {"$encrypted": type_, "size": len(data)}
    return decode_typed(inner, aes_decrypt(aes_key, data))


def aes_decrypt(key: bytes, data: bytes) -> bytes:
    """Decrypt like LangGraph's PycryptodomeAesCipher: EAX, nonce[16] + tag[16] + ciphertext."""
    try:
        from Crypto.Cipher import AES
    except ImportError as exc:
        raise MissingDependency("pycryptodome", "langgraph", "Decrypting msgpack+aes checkpoints") from exc
    if len(data) < 32:
        raise DecodeError(f"aes: truncated data ({len(data)} bytes, need at least 32)")
    try:
        cipher = AES.new(key, AES.MODE_EAX, nonce=data[:16])
        return cipher.decrypt_and_verify(data[32:], data[16:32])
    except ValueError as exc:
        raise DecodeError(f"aes: {exc} (wrong {AES_KEY_ENV} or damaged data)") from None


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "null": lambda data: None,
    "empty": lambda data: None,
    "bytes": bytes_summary,
    "bytearray": bytes_summary,
    "msgpack": decode_msgpack,
    "json": decode_json,
    "pickle": decode_pickle,
}


# --- what a decoded value names ----------------------------------------------


def iter_tagged(value: Any) -> Iterator[dict[str, Any]]:
    """Every tagged dict (``$type``) inside ``value``, without recursion limits."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("$type"), str):
                yield item
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def suspicious_types(value: Any) -> list[str]:
    """Class paths named in ``value`` that are not well-known data types.

    Method-call extensions are reported as ``module.Class.method`` unless the
    method is allowed (``datetime.datetime.fromisoformat``). Pickle markers are
    not included (their globals are listed in the marker itself).
    """
    found: list[str] = []
    for tagged in iter_tagged(value):
        name = tagged["$type"]
        if "$method" in tagged:
            method = tagged["$method"]
            bad = None if (name, method) in SAFE_METHODS else f"{name}.{method}"
        else:
            bad = None if is_allowed_type(name) else name
        if bad and bad not in found:
            found.append(bad)
    return found


def is_allowed_type(name: str) -> bool:
    """True for the well-known data types LangGraph itself treats as safe."""
    if name in SAFE_TYPES:
        return True
    last = name.rsplit(".", 1)[-1]
    known = last.removesuffix("Chunk") in MESSAGE_ROLES or last == "Document"
    return known and name.startswith(_LANGCHAIN_PREFIXES)


def is_dangerous_type(name: str) -> bool:
    """True when ``name`` lives in a module whose callables run code or touch the system."""
    parts = name.split(".")
    return parts[0] in DANGEROUS_MODULES or ".".join(parts[:2]) in DANGEROUS_MODULES


def dangerous_types(value: Any) -> list[str]:
    """The suspicious names that would run code: dangerous modules, or any
    method call other than the allowed ones (LangGraph before 1.0 called any)."""
    methods = {f"{t['$type']}.{t['$method']}" for t in iter_tagged(value) if "$method" in t}
    return [n for n in suspicious_types(value) if n in methods or is_dangerous_type(n)]
