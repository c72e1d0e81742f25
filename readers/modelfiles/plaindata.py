"""A walked pickle's value (``lastgood.readers.tensors.pickle_walk``) as plain JSON-like data.

Objects become their fields (``__class__`` kept), enum members their value, tensors
``{tensor: dtype, shape}``, bytes their length; depth and size are bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lastgood.readers.tensors.pickle_walk import GlobalRef, PlainObject
from lastgood.readers.tensors.torch_pickle import StorageRef, TensorRef

MAX_PLAIN_DEPTH = 12
MAX_PLAIN_ITEMS = 2_000



def plain(value: Any, depth: int = 0, budget: list[int] | None = None) -> Any:
    """A walked pickle value as JSON-like data: objects as their fields (``__class__`` kept),
    enums as their value, tensors as ``{dtype, shape}``."""
    budget = [MAX_PLAIN_ITEMS] if budget is None else budget
    budget[0] -= 1
    if depth > MAX_PLAIN_DEPTH or budget[0] < 0:
        return "…"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, GlobalRef):
        return value.name
    if isinstance(value, TensorRef):
        return {"tensor": value.dtype, "shape": list(value.shape)}
    if isinstance(value, StorageRef):
        return {"storage": value.dtype, "numel": value.numel}
    if isinstance(value, PlainObject):
        return _plain_object(value, depth, budget)
    if isinstance(value, Mapping):
        return {str(k): plain(v, depth + 1, budget) for k, v in value.items()}
    if isinstance(value, Iterable):
        return [plain(v, depth + 1, budget) for v in value]
    return repr(value)[:200]


def _plain_object(obj: PlainObject, depth: int, budget: list[int]) -> Any:
    state, args = obj.get("state"), tuple(obj.get("args") or ())
    if state is None and len(args) == 1 and isinstance(args[0], (str, int, float)):
        return args[0]  # an enum member: its value
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], Mapping):
        state = state[0]
    out: dict[str, Any] = {"__class__": obj.get("__class__")}
    if isinstance(state, Mapping):
        out.update({str(k): plain(v, depth + 1, budget) for k, v in state.items()})
    elif args:
        out["args"] = plain(list(args), depth + 1, budget)
    return out
