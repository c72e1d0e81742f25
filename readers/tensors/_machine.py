"""The stack machine behind :func:`pickle_walk.walk`.

It implements the opcodes of pickle protocols 0–5 that describe data, with
the semantics of CPython's ``pickle._Unpickler``, except that globals are
:class:`GlobalRef` values and calls go to allowlisted pure handlers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from .errors import PickleError, PickleTooLarge, TensorsError
from ._pickle_types import (
    GlobalRef, Handler, Limits, PersistentLoad, PickledOrderedDict, PlainObject,
    _map_name,
)

_CONST_OPS = frozenset(
    {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
     "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
     "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "BINBYTES",
     "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"}
)


class _Stop(Exception):
    """Internal: STOP reached."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Machine:
    """One run of the simulated unpickler."""

    def __init__(self, allow: Mapping[str, Handler],
                 persistent_load: PersistentLoad | None, limits: Limits) -> None:
        self.allow = allow
        self.persistent_load = persistent_load
        self.limits = limits
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[Any, Any] = {}
        self.depth: dict[int, tuple[Any, int]] = {}
        self.table: dict[str, Any] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")
        }
        self.table.update(dict.fromkeys(_CONST_OPS, self.push_arg))

    def run(self, ops: Iterator[tuple[str, Any, int]]) -> Any:
        """Execute ``ops`` until STOP and return the unpickled value."""
        table = self.table
        for name, arg, pos in ops:
            try:
                table[name](arg)
            except _Stop as stop:
                return stop.value
            except TensorsError:
                raise
            except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as exc:
                raise PickleError("BadPickle", f"{name} at {pos}: {type(exc).__name__}: {exc}") from None
        raise PickleError("BadPickle", "pickle has no STOP")

    # -- helpers ---------------------------------------------------------
    def pop_mark(self) -> list[Any]:
        """Return the items pushed since the last MARK, restoring the outer stack."""
        if not self.metastack:
            raise PickleError("BadPickle", "MARK expected")
        items = self.stack
        self.stack = self.metastack.pop()
        return items

    def check_size(self, container: Any) -> None:
        """Enforce ``max_container``."""
        if len(container) > self.limits.max_container:
            raise PickleTooLarge("PickleTooLarge", f"container over {self.limits.max_container} items")

    def make_tuple(self, items: list[Any] | tuple[Any, ...]) -> tuple[Any, ...]:
        """Build a tuple, bounding nesting so hashing it cannot exhaust the C stack."""
        result = tuple(items)
        self.check_size(result)
        inner = [self.depth.get(id(x), (None, 1))[1] for x in result
                 if type(x) in (tuple, frozenset)]
        level = 1 + max(inner, default=0)
        if level > self.limits.max_tuple_depth:
            raise PickleTooLarge("PickleTooLarge", f"tuples nested over {self.limits.max_tuple_depth} deep")
        if result:
            self.depth[id(result)] = (result, level)
        return result

    def call(self, target: Any, args: Any) -> Any:
        """Apply an allowlisted global to ``args`` via its handler."""
        if not isinstance(target, GlobalRef):
            raise PickleError("BadCall", f"cannot call {type(target).__name__}")
        if type(args) is not tuple:
            raise PickleError("BadCall", f"{target.name} called with non-tuple args")
        return target.handler(target.name, args)

    def global_ref(self, name: str) -> GlobalRef:
        """Look up an allowlisted name (already checked by the first pass)."""
        if name not in self.allow:
            raise PickleError("BadPickle", f"global {name} changed between passes")
        return GlobalRef(name, self.allow[name])

    # -- opcodes ----------------------------------------------------------
    def push_arg(self, arg: Any) -> None:
        """Push a constant decoded from the opcode's argument."""
        self.stack.append(arg)

    def op_NONE(self, arg: Any) -> None:
        """Push None."""
        self.stack.append(None)

    def op_NEWTRUE(self, arg: Any) -> None:
        """Push True."""
        self.stack.append(True)

    def op_NEWFALSE(self, arg: Any) -> None:
        """Push False."""
        self.stack.append(False)

    def op_PROTO(self, arg: Any) -> None:
        """Protocol marker: nothing to do."""

    op_FRAME = op_PROTO

    def op_STOP(self, arg: Any) -> None:
        """End of pickle: the top of the stack is the result."""
        raise _Stop(self.stack.pop())

    def op_MARK(self, arg: Any) -> None:
        """Start a new mark group."""
        self.metastack.append(self.stack)
        self.stack = []

    def op_POP(self, arg: Any) -> None:
        """Discard the top item, or the mark group if the stack is empty."""
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_POP_MARK(self, arg: Any) -> None:
        """Discard everything since the last MARK."""
        self.pop_mark()

    def op_DUP(self, arg: Any) -> None:
        """Push the top item again."""
        self.stack.append(self.stack[-1])

    def op_EMPTY_TUPLE(self, arg: Any) -> None:
        """Push ()."""
        self.stack.append(())

    def op_TUPLE(self, arg: Any) -> None:
        """Build a tuple from the mark group."""
        items = self.pop_mark()
        self.stack.append(self.make_tuple(items))

    def op_TUPLE1(self, arg: Any) -> None:
        """Wrap the top item in a 1-tuple."""
        self.stack[-1] = self.make_tuple([self.stack[-1]])

    def op_TUPLE2(self, arg: Any) -> None:
        """Build a 2-tuple from the top two items."""
        self.stack[-2:] = [self.make_tuple(self.stack[-2:])]
        if len(self.stack[-1]) != 2:
            raise PickleError("BadPickle", "stack underflow")

    def op_TUPLE3(self, arg: Any) -> None:
        """Build a 3-tuple from the top three items."""
        self.stack[-3:] = [self.make_tuple(self.stack[-3:])]
        if len(self.stack[-1]) != 3:
            raise PickleError("BadPickle", "stack underflow")

    def op_EMPTY_LIST(self, arg: Any) -> None:
        """Push []."""
        self.stack.append([])

    def op_LIST(self, arg: Any) -> None:
        """Build a list from the mark group."""
        items = self.pop_mark()
        self.stack.append(items)

    def op_APPEND(self, arg: Any) -> None:
        """Append the top item to the list below it."""
        item = self.stack.pop()
        self.extend(self.stack[-1], [item])

    def op_APPENDS(self, arg: Any) -> None:
        """Extend the list below the mark with the mark group."""
        items = self.pop_mark()
        self.extend(self.stack[-1], items)

    def extend(self, target: Any, items: list[Any]) -> None:
        """Append ``items`` to a list (or to a plain object's ``listitems``)."""
        if isinstance(target, PlainObject):
            target = target.setdefault("listitems", [])
        if type(target) is not list:
            raise PickleError("BadPickle", f"cannot append to {type(target).__name__}")
        target.extend(items)
        self.check_size(target)

    def op_EMPTY_DICT(self, arg: Any) -> None:
        """Push {}."""
        self.stack.append({})

    def op_DICT(self, arg: Any) -> None:
        """Build a dict from key/value pairs in the mark group."""
        items = self.pop_mark()
        result: dict[Any, Any] = {}
        self.stack.append(result)
        self.set_items(result, items)

    def op_SETITEM(self, arg: Any) -> None:
        """Set one key on the dict below the key and value."""
        value = self.stack.pop()
        key = self.stack.pop()
        self.set_items(self.stack[-1], [key, value])

    def op_SETITEMS(self, arg: Any) -> None:
        """Set the mark group's key/value pairs on the dict below the mark."""
        items = self.pop_mark()
        self.set_items(self.stack[-1], items)

    def set_items(self, target: Any, items: list[Any]) -> None:
        """Store alternating keys and values into a dict-like target."""
        if isinstance(target, PlainObject):
            target = target.setdefault("dictitems", {})
        if not isinstance(target, dict):
            raise PickleError("BadPickle", f"cannot set items on {type(target).__name__}")
        if len(items) % 2:
            raise PickleError("BadPickle", "odd number of items for SETITEMS")
        for i in range(0, len(items), 2):
            target[items[i]] = items[i + 1]
        self.check_size(target)

    def op_EMPTY_SET(self, arg: Any) -> None:
        """Push an empty set."""
        self.stack.append(set())

    def op_ADDITEMS(self, arg: Any) -> None:
        """Add the mark group to the set below the mark."""
        items = self.pop_mark()
        target = self.stack[-1]
        if type(target) is not set:
            raise PickleError("BadPickle", f"cannot add items to {type(target).__name__}")
        target.update(items)
        self.check_size(target)

    def op_FROZENSET(self, arg: Any) -> None:
        """Build a frozenset from the mark group."""
        result = frozenset(self.pop_mark())
        self.check_size(result)
        self.stack.append(result)

    def op_GET(self, arg: Any) -> None:
        """Push a memo entry."""
        if arg not in self.memo:
            raise PickleError("BadPickle", f"memo key {arg!r} missing")
        self.stack.append(self.memo[arg])

    op_BINGET = op_LONG_BINGET = op_GET

    def op_PUT(self, arg: Any) -> None:
        """Store the top item in the memo."""
        if arg < 0:
            raise PickleError("BadPickle", "negative PUT index")
        self.memo[arg] = self.stack[-1]
        if len(self.memo) > self.limits.max_memo:
            raise PickleTooLarge("PickleTooLarge", f"more than {self.limits.max_memo} memo entries")

    op_BINPUT = op_LONG_BINPUT = op_PUT

    def op_MEMOIZE(self, arg: Any) -> None:
        """Store the top item at the next memo index."""
        self.op_PUT(len(self.memo))

    def op_GLOBAL(self, arg: Any) -> None:
        """Push a reference to an allowlisted global."""
        module, _, name = str(arg).partition(" ")
        self.stack.append(self.global_ref(_map_name(module, name)))

    def op_STACK_GLOBAL(self, arg: Any) -> None:
        """Push a global named by the two strings on the stack."""
        name = self.stack.pop()
        module = self.stack.pop()
        if type(module) is not str or type(name) is not str:
            raise PickleError("BadPickle", "STACK_GLOBAL needs two strings")
        self.stack.append(self.global_ref(_map_name(module, name)))

    def op_REDUCE(self, arg: Any) -> None:
        """Call the global below the argument tuple."""
        args = self.stack.pop()
        self.stack[-1] = self.call(self.stack[-1], args)

    def op_NEWOBJ(self, arg: Any) -> None:
        """``cls.__new__(cls, *args)`` through the handler."""
        args = self.stack.pop()
        cls = self.stack.pop()
        self.stack.append(self.call(cls, args))

    def op_NEWOBJ_EX(self, arg: Any) -> None:
        """Like NEWOBJ with keyword arguments (kept on plain objects)."""
        kwargs = self.stack.pop()
        args = self.stack.pop()
        cls = self.stack.pop()
        if type(kwargs) is not dict:
            raise PickleError("BadPickle", "NEWOBJ_EX kwargs must be a dict")
        result = self.call(cls, args)
        if kwargs and isinstance(result, PlainObject):
            result["kwargs"] = kwargs
        self.stack.append(result)

    def op_INST(self, arg: Any) -> None:
        """Protocol-0 instance creation: global named inline, args from mark."""
        args = self.make_tuple(self.pop_mark())
        module, _, name = str(arg).partition(" ")
        self.stack.append(self.call(self.global_ref(_map_name(module, name)), args))

    def op_OBJ(self, arg: Any) -> None:
        """Protocol-1 instance creation: class and args from the mark group."""
        items = self.pop_mark()
        if not items:
            raise PickleError("BadPickle", "OBJ without class")
        self.stack.append(self.call(items[0], self.make_tuple(items[1:])))

    def op_BUILD(self, arg: Any) -> None:
        """Attach state to the object below it (plain objects and OrderedDicts only)."""
        state = self.stack.pop()
        inst = self.stack[-1]
        if isinstance(inst, PlainObject):
            old = inst.get("state")
            if isinstance(old, dict) and isinstance(state, dict):
                old.update(state)
            else:
                inst["state"] = state
        elif isinstance(inst, PickledOrderedDict):
            inst.state = state
        else:
            raise PickleError("BadPickle", f"cannot BUILD a {type(inst).__name__}")

    def op_PERSID(self, arg: Any) -> None:
        """Resolve a text persistent id."""
        self.stack.append(self.load_persistent(arg))

    def op_BINPERSID(self, arg: Any) -> None:
        """Resolve the persistent id on top of the stack."""
        self.stack[-1] = self.load_persistent(self.stack[-1])

    def load_persistent(self, pid: Any) -> Any:
        """Call the caller's ``persistent_load``, if any."""
        if self.persistent_load is None:
            raise PickleError("BadPickle", "persistent id without persistent_load")
        return self.persistent_load(pid)

    def op_NEXT_BUFFER(self, arg: Any) -> None:
        """Out-of-band buffers are not supported."""
        raise PickleError("BadPickle", "out-of-band buffers are not supported")

    op_READONLY_BUFFER = op_NEXT_BUFFER
