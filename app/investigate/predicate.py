"""The tiny predicate language of ``lastgood bisect --where`` (parsed, never eval'd).

    expr    := and ("or" and)*
    and     := unary ("and" unary)*
    unary   := "not" unary | "(" expr ")" | compare
    compare := operand (("<" | "<=" | ">" | ">=" | "==" | "!=") operand)?
    operand := "len(" POINTER ")" | POINTER | NUMBER | STRING | true | false | null

A POINTER is a JSON Pointer into the state (``/balance``, ``/messages/0/content``;
``/`` alone is the whole state). A missing path is null; an ordering comparison
with null or between a number and a string is false. An operand alone is true
when its value is truthy. Examples: ``/balance < 0``, ``len(/messages) > 200``,
``/status == "failed" or not /ok``.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lastgood.errors import UsageError

TOKEN = re.compile(r"""\s*(?:
    (?P<len>len\s*\()
  | (?P<pointer>/[^\s()<>=!]*)
  | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<string>"(?:[^"\\]|\\.)*"|'[^']*')
  | (?P<op><=|>=|==|!=|<|>)
  | (?P<paren>[()])
  | (?P<word>[A-Za-z_]+)
)""", re.VERBOSE)
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    "==": operator.eq, "!=": operator.ne}
MISSING = object()


@dataclass(frozen=True)
class Predicate:
    """A parsed predicate: ``evaluate(state) -> bool``; ``pointers`` it reads."""

    text: str
    node: tuple[Any, ...]

    def evaluate(self, state: Any) -> bool:
        return bool(_eval(self.node, state))

    @property
    def pointers(self) -> list[str]:
        found: list[str] = []
        stack = [self.node]
        while stack:
            node = stack.pop()
            if node[0] in ("ptr", "len"):
                found.append(node[1])
            else:
                stack.extend(n for n in node[1:] if isinstance(n, tuple))
        return sorted(set(found))


def parse(text: str) -> Predicate:
    """The predicate in ``text``; UsageError naming the problem when it is not one."""
    parser = _Parser(_tokens(text), text)
    node = parser.expr()
    if parser.peek() is not None:
        raise UsageError(_quoting(text, f"unexpected {parser.peek()[1]!r} in --where {text!r}"))
    return Predicate(text, node)


def _quoting(text: str, message: str) -> str:
    """``message``, unless ``text`` holds something redaction would hide (a compared password):
    then a message that quotes no piece of it (a fragment cut out of it escapes the redaction)."""
    from lastgood.redact import redact_text

    return message if redact_text(text) == text else "cannot read --where (it compares a secret; not shown)"


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise UsageError(_quoting(text, f"cannot read --where {text!r} at {text[pos:].strip()[:20]!r}"))
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens, self.pos, self.text = tokens, 0, text

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise UsageError(f"--where {self.text!r} ends too early")
        self.pos += 1
        return token

    def _is_word(self, word: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == "word" and token[1].lower() == word

    def expr(self) -> tuple[Any, ...]:
        node = self.conj()
        while self._is_word("or"):
            self.take()
            node = ("or", node, self.conj())
        return node

    def conj(self) -> tuple[Any, ...]:
        node = self.unary()
        while self._is_word("and"):
            self.take()
            node = ("and", node, self.unary())
        return node

    def unary(self) -> tuple[Any, ...]:
        if self._is_word("not"):
            self.take()
            return ("not", self.unary())
        if self.peek() == ("paren", "("):
            self.take()
            node = self.expr()
            if self.take() != ("paren", ")"):
                raise UsageError(f"missing ')' in --where {self.text!r}")
            return node
        left = self.operand()
        token = self.peek()
        if token is not None and token[0] == "op":
            self.take()
            return ("cmp", token[1], left, self.operand())
        return ("truthy", left)

    def operand(self) -> tuple[Any, ...]:
        kind, value = self.take()
        if kind == "len":
            ptr_kind, pointer = self.take()
            if ptr_kind != "pointer" or self.take() != ("paren", ")"):
                raise UsageError(f"len() takes one path, like len(/messages), in --where {self.text!r}")
            return ("len", pointer)
        if kind == "pointer":
            return ("ptr", value)
        if kind == "number":
            return ("lit", json.loads(value) if re.fullmatch(r"-?\d+", value) else float(value))
        if kind == "string":
            return ("lit", json.loads(value) if value.startswith('"') else value[1:-1])
        if kind == "word" and value.lower() in ("true", "false", "null"):
            return ("lit", {"true": True, "false": False, "null": None}[value.lower()])
        raise UsageError(_quoting(self.text, f"expected a path, len(path) or a value, not {value!r}, "
                                             f"in --where {self.text!r}"))


def _eval(node: tuple[Any, ...], state: Any) -> Any:
    kind = node[0]
    if kind == "or":
        return _eval(node[1], state) or _eval(node[2], state)
    if kind == "and":
        return _eval(node[1], state) and _eval(node[2], state)
    if kind == "not":
        return not _eval(node[1], state)
    if kind == "truthy":
        value = _value(node[1], state)
        return value is not MISSING and bool(value)
    if kind == "cmp":
        return _compare(node[1], _value(node[2], state), _value(node[3], state))
    raise AssertionError(f"unknown node {kind}")  # pragma: no cover


def _value(node: tuple[Any, ...], state: Any) -> Any:
    if node[0] == "lit":
        return node[1]
    found = shown_value(node[1], resolve_pointer(state, node[1]))
    if node[0] == "len":
        return len(found) if isinstance(found, (list, dict, str)) else MISSING
    return found


def _compare(op: str, left: Any, right: Any) -> bool:
    left = None if left is MISSING else left
    right = None if right is MISSING else right
    if op in ("==", "!="):
        return COMPARE[op](left, right)
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right))
    strings = all(isinstance(v, str) for v in (left, right))
    return bool((numbers or strings) and COMPARE[op](left, right))


def shown_value(pointer: str, found: Any) -> Any:
    """The value at ``pointer`` as every page and command shows it: a secret (under a secret key,
    or shaped like one) is the mask, so a predicate can never confirm a guessed secret, nor find
    its length or its letters by comparing (``/api_key > "sk-a"``). Containers are kept as they
    are (their length and truthiness hide nothing); the leaves a predicate compares are what count."""
    from lastgood.redact import MASK, is_secret_key, redact

    if found is MISSING or found is None or found == "" or isinstance(found, (dict, list)):
        return found  # as redaction shows them too (an empty secret is no secret)
    if any(is_secret_key(raw.replace("~1", "/").replace("~0", "~")) for raw in pointer.split("/")[1:]):
        return MASK
    return redact(found)


def resolve_pointer(state: Any, pointer: str) -> Any:
    """The value at a JSON Pointer (``MISSING`` when there is none); ``/`` is the root."""
    if pointer in ("", "/"):
        return state
    node = state
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            if token in node:
                node = node[token]
                continue
            matches = [k for k in node if str(k) == token]
            if not matches:
                return MISSING
            node = node[matches[0]]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return MISSING
    return node
