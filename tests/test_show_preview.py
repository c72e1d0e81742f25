"""``lastgood show``'s table view redacts only the part of a state its preview prints
(``lastgood.investigate.preview``): the printed text is the same as from the whole state."""

from __future__ import annotations

import random
from typing import Any

import pytest

from lastgood.cli.output import STATE_PREVIEW_CHARS, dumps, escape_tree
from lastgood.investigate.preview import redacted_prefix
from lastgood.readers.openai_agents.reader import OpenAIAgentsReader
from lastgood.readers.base import as_table, record_from_row
from lastgood.redact import MASK, redact
from tests.helpers import ROOT

SECRET = "sk-proj-Fx3kQ9mZ2vT7LwN4bR8cY1dH6jP0sA5eG2uK9oM3qV7xB4nC"


def view(state: Any) -> str:
    """What ``render_show`` prints of a state, before cutting it."""
    return dumps(escape_tree(state))


def same_preview(state: Any, chars: int) -> str:
    whole, part = view(redact(state)), view(redacted_prefix(state, chars))
    assert part[:chars] == whole[:chars]
    assert (len(part) > chars) == (len(whole) > chars)
    return part


def message(i: int, rng: random.Random) -> dict[str, Any]:
    kinds = [
        {"role": "user", "content": f"question {i} " + "x" * rng.randrange(0, 300)},
        {"type": "function_call", "name": "rotate", "call_id": f"call_{i}",
         "arguments": {"api_key": SECRET, "n": i, "nested": [[i, {"token": "abc"}]]}},
        {"type": "function_call_output", "call_id": f"call_{i}", "output": f"ok \x1b[31m{i}\u202e done"},
        {"role": "assistant", "content": [{"type": "output_text", "text": f"Bearer {SECRET} said {i}"}]},
        {"password": ["a", {"deep": "b"}], "ok": True, "n": 1.5, "none": None},
    ]
    return kinds[rng.randrange(len(kinds))]


@pytest.mark.parametrize("chars", [0, 57, STATE_PREVIEW_CHARS])
def test_a_big_state_prints_what_the_whole_state_prints(chars: int) -> None:
    rng = random.Random(chars)
    state = {"messages": [message(i, rng) for i in range(1200)], "session": {"session_id": "s", "secret": "x"}}
    part = same_preview(state, chars)
    assert len(part) < len(view(redact(state))) / 5  # only the head was redacted and encoded
    assert SECRET not in part and MASK in view(redact(state))


def test_small_shapes_and_edge_values() -> None:
    rng = random.Random(7)
    cases: list[Any] = [
        "plain text", SECRET * 400, 12, None, [], {},
        {"state": {"api_key": SECRET * 300, "count": 3}, "messages": [message(i, rng) for i in range(200)]},
        [[[message(i, rng) for i in range(50)] for _ in range(4)] for _ in range(3)],
        ({"a": 1},) * 600,  # a tuple: redacted as a list
        [{"id": i, "text": f"row {i} token={SECRET}"} for i in range(600)],  # records of one shape
        {1: "x" * 30000, 2: "y"},  # keys that are not text: redacted whole
        {"x" * 100: {"password": "p" * 40000}, "tail": list(range(2000))},
        {"sk-" + "a" * 20: "x" * 30000, "sk-" + "b" * 20: "y", "after": "z" * 30000},  # keys redacted alike
    ]
    deep: Any = "leaf " * 2000
    for _ in range(260):  # past MAX_DEPTH
        deep = [deep, "z" * 10]
    cases.append(deep)
    for state in cases:
        for chars in (10, STATE_PREVIEW_CHARS):
            same_preview(state, chars)


def test_show_of_an_openai_session_head_matches_the_whole_state() -> None:
    reader = OpenAIAgentsReader(str(ROOT / "sample_data" / "openai_agents.sqlite"))
    try:
        rows = [r for b in reader.scan().checkpoints for r in as_table(b).to_pylist()]
        heads = {r["run_id"]: r for r in rows if r["status"] == "ok"}  # the last listed row of each run
        for row in heads.values():
            state = reader.load_state(record_from_row(row))
            for chars in (100, 1000, STATE_PREVIEW_CHARS):
                same_preview(state, chars)
    finally:
        reader.close()
