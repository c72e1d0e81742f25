"""The diff engine: property tests, message alignment, bytes, redaction, deep states, rendering."""

from __future__ import annotations

import copy
import json

from deepdiff import DeepDiff
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lastgood.investigate.diff import Change, DiffResult, diff_states, render_text
from lastgood.investigate.diff_apply import apply_changes

quick = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False, width=32),
                    st.text(max_size=4), st.binary(max_size=3))
keys = st.text(alphabet="ab/~c", min_size=0, max_size=3)
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=5), st.dictionaries(keys, inner, max_size=5)), max_leaves=25)


def message(i: int, content: str | None = None, role: str = "human") -> dict:
    return {"$type": "langchain_core.messages.human.HumanMessage", "type": role,
            "id": f"msg-{i}", "content": content if content is not None else f"hello {i}",
            "additional_kwargs": {}}


def conversation(n: int) -> dict:
    return {"messages": [message(i) for i in range(n)], "step": 3}


# ---------------------------------------------------------------- properties

@quick
@given(trees, trees)
def test_applying_the_changes_to_a_gives_b(a, b):
    result = diff_states(a, b, redact=False)
    assert apply_changes(a, result.changes) == b
    assert not diff_states(apply_changes(a, result.changes), b, redact=False).changes


@quick
@given(trees)
def test_a_state_has_no_changes_against_a_copy_of_itself(a):
    assert diff_states(a, copy.deepcopy(a)).changes == []


def _mutated(data: st.DataObject, node, counter: list[int]):
    """B from A: leaves replaced by fresh values, dict keys added/removed, list items appended
    at the end — never a list item moved or removed before others."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            choice = data.draw(st.sampled_from(["keep", "keep", "mutate", "drop"]))
            if choice != "drop":
                out[k] = _mutated(data, v, counter) if choice == "mutate" else v
        if data.draw(st.booleans()):
            counter[0] += 1
            out[f"new{counter[0]}"] = counter[0]
        return out
    if isinstance(node, list):
        out = [(_mutated(data, v, counter) if data.draw(st.booleans()) else v) for v in node]
        if data.draw(st.booleans()):
            counter[0] += 1
            out.append(f"appended-{counter[0]}")
        return out
    counter[0] += 1
    return data.draw(st.sampled_from([f"fresh-{counter[0]}", 1000 + counter[0], [counter[0]], node]))


def _deepdiff_paths(a, b) -> set[tuple]:
    tree = DeepDiff(a, b, view="tree", verbose_level=2, threshold_to_diff_deeper=0)
    paths = set()
    for kind, levels in tree.items():
        for level in levels:
            use_t2 = kind in ("iterable_item_added", "dictionary_item_added")
            paths.add(tuple(level.path(output_format="list", use_t2=use_t2)))
    return paths


def _our_paths(result: DiffResult) -> set[tuple]:
    out = set()
    for c in result.changes:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in c.path.split("/")[1:]]
        out.add(tuple(int(t) if t.isdigit() else t for t in tokens))  # keys here are never digits
    return out


unique_lists = st.lists(st.one_of(st.integers(-50, 50), st.text(alphabet="xyz", max_size=3)),
                        unique=True, max_size=6)
aligned_trees = st.recursive(st.one_of(st.integers(-5, 5), st.text(alphabet="pq", max_size=2), unique_lists),
                             lambda inner: st.dictionaries(st.text(alphabet="km", min_size=1, max_size=2),
                                                           inner, max_size=4), max_leaves=20)


@quick
@given(aligned_trees, st.data())
def test_changed_leaf_paths_match_deepdiff_when_no_list_item_moves(a, data):
    """Lists here hold unique items and only change in place or at their end: then identity
    alignment and DeepDiff's positional view agree on every changed path. (With moved or
    removed items they differ by design: DeepDiff reports every shifted index.)"""
    b = _mutated(data, a, [0])
    ours = _our_paths(diff_states(a, b, redact=False))
    assert ours == _deepdiff_paths(a, b)


# ---------------------------------------------------------------- messages

def test_appending_4000_messages_is_4000_adds():
    a = conversation(10_000)
    b = copy.deepcopy(a)
    b["messages"] += [message(10_000 + i) for i in range(4_000)]
    result = diff_states(a, b)
    assert result.summary == {"added": 4_000, "removed": 0, "changed": 0, "moved": 0}
    assert result.changes[0] == Change("add", "/messages/10000", new=message(10_000))
    assert result.changes[-1].path == "/messages/13999"


def test_removing_one_message_in_the_middle_is_one_remove():
    a = conversation(10_000)
    b = copy.deepcopy(a)
    del b["messages"][5_000]
    result = diff_states(a, b)
    assert result.changes == [Change("remove", "/messages/5000", old=message(5_000))]


def test_editing_one_message_in_place_is_one_change_below_its_path():
    a = conversation(50)
    b = copy.deepcopy(a)
    b["messages"][17]["content"] = "edited"
    assert diff_states(a, b).changes == [Change("change", "/messages/17/content", "hello 17", "edited")]


def test_messages_align_on_id_even_when_their_content_changes_and_others_arrive():
    a = conversation(5)
    b = copy.deepcopy(a)
    b["messages"][2]["content"] = "rewritten"
    b["messages"].insert(0, message(99))
    result = diff_states(a, b)
    assert [(c.op, c.path) for c in result.changes] == [("add", "/messages/0"),
                                                        ("change", "/messages/3/content")]
    assert apply_changes(a, diff_states(a, b, redact=False).changes) == b


def test_a_reordered_message_is_one_move():
    a = conversation(20)
    b = copy.deepcopy(a)
    b["messages"].insert(2, b["messages"].pop(15))
    result = diff_states(a, b)
    assert result.changes == [Change("move", "/messages/2", from_path="/messages/15")]
    assert result.summary["moved"] == 1
    assert apply_changes(a, result.changes) == b


def test_lists_without_ids_align_on_content():
    a = {"xs": [{"v": i} for i in range(10)]}
    b = copy.deepcopy(a)
    del b["xs"][3]
    b["xs"][6]["v"] = 70
    result = diff_states(a, b)
    assert [(c.op, c.path) for c in result.changes] == [("remove", "/xs/3"), ("change", "/xs/6/v")]


def test_tool_calls_align_on_their_ids():
    call = lambda i, arg: {"id": f"call-{i}", "name": "search", "args": {"q": arg}}  # noqa: E731
    a = {"tool_calls": [call(1, "x"), call(2, "y")]}
    b = {"tool_calls": [call(2, "y2"), call(1, "x")]}
    result = diff_states(a, b)
    assert {(c.op, c.path) for c in result.changes} == {("move", "/tool_calls/0"), ("change", "/tool_calls/0/args/q")}
    assert apply_changes(a, result.changes) == b


# ---------------------------------------------------------------- leaves

def test_numbers_carry_their_delta_and_types_change_as_type_change():
    result = diff_states({"balance": 10, "ok": 1, "n": 2.5}, {"balance": -5, "ok": True, "n": 3})
    by_path = {c.path: c for c in result.changes}
    assert by_path["/balance"].delta == -15
    assert by_path["/ok"].op == "type_change"
    assert by_path["/n"].delta == 0.5


def test_bytes_compare_by_size_and_hash():
    a = {"blob": b"abc", "summary": {"$bytes": 3, "sha256": "aa"}, "same": b"x"}
    b = {"blob": b"abcd", "summary": {"$bytes": 5, "sha256": "bb"}, "same": b"x"}
    result = diff_states(a, b)
    by_path = {c.path: c for c in result.changes}
    assert set(by_path) == {"/blob", "/summary"}
    assert by_path["/blob"].delta == 1 and by_path["/summary"].delta == 2
    exported = result.to_dict("A", "B")["changes"][0]
    assert exported["new"]["$bytes"] == 4 and len(exported["new"]["sha256"]) == 64
    json.dumps(result.to_dict("A", "B"))


def test_nan_that_stays_nan_is_not_a_change():
    assert diff_states({"x": float("nan")}, {"x": float("nan")}).changes == []


# ---------------------------------------------------------------- redaction, shape, rendering

def test_secrets_are_redacted_in_every_reported_value():
    a = {"config": {"api_key": "sk-old0123456789abcdef"}, "notes": []}
    b = {"config": {"api_key": "sk-new0123456789abcdef"},
         "notes": ["use sk-live0123456789abcdef", {"password": "hunter2"}]}
    result = diff_states(a, b)
    text = json.dumps(result.to_dict("a", "b")) + render_text(result)
    assert "0123456789abcdef" not in text and "hunter2" not in text
    assert result.changes[0] == Change("change", "/config/api_key", "[redacted]", "[redacted]")
    raw = diff_states(a, b, redact=False)
    assert raw.changes[0].new == "sk-new0123456789abcdef"


def test_to_dict_is_the_product_shape():
    result = diff_states({"a": 1, "gone": 2}, {"a": 3, "new": 4})
    assert result.to_dict("A", "B") == {
        "a": "A", "b": "B",
        "changes": [{"op": "change", "path": "/a", "old": 1, "new": 3, "delta": 2},
                    {"op": "remove", "path": "/gone", "old": 2, "new": None},
                    {"op": "add", "path": "/new", "old": None, "new": 4}],
        "summary": {"added": 1, "removed": 1, "changed": 1, "moved": 0}}


def test_pointer_tokens_are_escaped():
    result = diff_states({}, {"a/b": {"~x": 1}})
    assert result.changes[0].path == "/a~1b"
    assert apply_changes({"q": {}}, diff_states({"q": {}}, {"q": {"~x": 1}}).changes) == {"q": {"~x": 1}}
    assert diff_states({"q": {}}, {"q": {"~x": 1}}).changes[0].path == "/q/~0x"


def test_render_text_shows_messages_as_role_and_first_line_and_the_rest_as_old_to_new():
    a = {"messages": [message(0, "hi")], "balance": 5, "old": 1}
    b = {"messages": [message(0, "hi"), message(1, "Sure, here it is\nsecond line", role="ai")],
         "balance": 7, "plan": [1]}
    text = render_text(diff_states(a, b))
    assert text.splitlines() == [
        "~ /balance: 5 → 7 (+2)",
        "+ /messages/1: [ai] Sure, here it is",
        "- /old: 1",
        "+ /plan: [1]",
        "2 added, 1 removed, 1 changed",
    ]
    assert render_text(diff_states(a, a)) == "no changes"
    assert "… 2 more changes" in render_text(diff_states(a, b), limit=2)


# ---------------------------------------------------------------- depth and size

def _deep_dict(depth: int, leaf) -> dict:
    root = node = {}
    for _ in range(depth):
        node["c"] = {}
        node = node["c"]
    node["v"] = leaf
    return root


def _deep_list(depth: int, leaf) -> list:
    root = node = []
    for _ in range(depth):
        child: list = []
        node.append(child)
        node = child
    node.append(leaf)
    return root


def test_ten_thousand_levels_deep_do_not_crash():
    result = diff_states(_deep_dict(10_000, 1), _deep_dict(10_000, 2))
    assert [c.op for c in result.changes] == ["change"]
    assert result.changes[0].path.count("/") == 10_001
    lists = diff_states(_deep_list(10_000, "x"), _deep_list(10_000, "y"))
    assert lists.summary["changed"] == 1
    added = diff_states({}, {"deep": _deep_list(10_000, "sk-secret0123456789abc")})
    exported = json.dumps(added.to_dict("a", "b"))  # depth capped for JSON encoders
    assert "sk-secret" not in exported and "$nested" in exported
    render_text(added)


secretish = st.sampled_from(["sk-live0123456789abcdef", "Bearer abcdefghijklmnop", "token=hunter2", "api_key",
                             "AKIA0123456789ABCDEF", "x ghp_0123456789abcdefghij", "PASSWORD: x",
                             "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeK",
                             "-----BEGIN RSA PRIVATE KEY-----\nabc", "https://u:p@h", "DSN=x", "Cookie: a=b",
                             "postgresql://u:pw@host/db", "u:pw@host", "plain", "tokens", "a\\b", "x\ny"])
secret_trees = st.recursive(st.one_of(secretish, st.integers(), st.none()), lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(secretish, st.text(max_size=3)), inner, max_size=4)),
    max_leaves=20)


@quick
@given(secret_trees, st.one_of(st.none(), secretish))
def test_reported_values_are_redacted_exactly_like_lastgood_redact(value, key):
    from lastgood.investigate.diff_values import redact_value as _redact_value
    from lastgood.redact import redact

    expected = redact({key: value})[redact(key)] if isinstance(key, str) else redact(value)
    assert _redact_value(key, value) == expected


# ---------------------------------------------------------------- alignment of id-keyed lists (fast path)

def _lcs_length(xs: list, ys: list) -> int:
    table = [[0] * (len(ys) + 1) for _ in range(len(xs) + 1)]
    for i, x in enumerate(xs):
        for j, y in enumerate(ys):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


id_lists = st.lists(st.integers(0, 14), unique=True, max_size=12)


@quick
@given(id_lists, id_lists, st.sets(st.integers(0, 14)))
def test_id_keyed_lists_keep_a_longest_common_subsequence(ids_a, ids_b, edited):
    """Every item has a unique id (patience alignment): B is rebuilt, items in a longest
    common subsequence stay put, the other common ones are moves, edits are changes below."""
    a = {"messages": [message(i) for i in ids_a]}
    b = {"messages": [message(i, "edited" if i in edited else None) for i in ids_b]}
    result = diff_states(a, b, redact=False)
    assert apply_changes(a, result.changes) == b
    common = set(ids_a) & set(ids_b)
    moves = [c for c in result.changes if c.op == "move"]
    assert len(moves) == len(common) - _lcs_length(ids_a, ids_b)
    assert result.summary["removed"] == len(set(ids_a) - set(ids_b))
    assert result.summary["added"] == len(set(ids_b) - set(ids_a))
    edits = {c.path for c in result.changes if c.op == "change"}
    assert len(edits) == len(common & edited)


def test_an_equal_length_tie_keeps_the_earliest_items_of_a():
    a = {"messages": [message(i) for i in (1, 2, 3, 4)]}
    b = {"messages": [message(i) for i in (3, 4, 1, 2)]}
    result = diff_states(a, b, redact=False)
    assert [(c.op, c.path, c.from_path) for c in result.changes] == [
        ("move", "/messages/0", "/messages/2"), ("move", "/messages/1", "/messages/3")]  # 1, 2 stay


def test_to_dict_keeps_plain_values_and_summarises_bytes():
    plain = {"messages": [message(0)], "deep": [[[1]]]}
    assert diff_states({}, {"p": plain}, redact=False).to_dict()["changes"][0]["new"] is plain  # not copied
    result = diff_states({}, {"p": plain, "raw": b"\x00\x01"}, redact=False)
    out = {c["path"]: c for c in result.to_dict()["changes"]}
    assert out["/p"]["new"] == plain
    assert out["/raw"]["new"] == {"$bytes": 2, "sha256": __import__("hashlib").sha256(b"\x00\x01").hexdigest()}
    nested: list = []
    for _ in range(300):
        nested = [nested]
    deep = diff_states({}, {"deep": nested}, redact=False).to_dict()["changes"][0]["new"]
    assert "deeper than" in json.dumps(deep)  # still cut at MAX_JSON_DEPTH


def test_redaction_anchors_survive_json_escaping():
    """The batch screen reads JSON text: no anchor may hold a character JSON escapes."""
    from lastgood.redact import REDACTION_ANCHORS

    for anchor in REDACTION_ANCHORS:
        assert json.dumps(anchor, ensure_ascii=False) == f'"{anchor}"'
    changes = [message(i, "line one\nline two") for i in range(300)]
    changes[257]["content"] = 'token "ghp_' + "a" * 36 + '"\n'
    result = diff_states({"messages": []}, {"messages": changes})
    assert "ghp_" not in json.dumps(result.to_dict())
    assert result.changes[0].new == changes[0]


def test_equal_values_fingerprint_equal_however_their_parts_are_shared():
    """Two decodes of one message share their strings differently; marshal's format 3+
    would write back-references for the shared ones and tell them apart."""
    from lastgood.investigate.diff import _Fingerprints

    text = "".join(["tool ", "result"])
    shared = [{"content": text, "name": text}, text]
    separate = [{"content": "".join(["tool ", "result"]), "name": "".join(["tool ", "res", "ult"])},
                "".join(["tool", " result"])]
    fps = _Fingerprints()
    assert fps.of(shared) == fps.of(separate)
    assert fps.equal_each([shared], [separate]) == [True]
    assert diff_states({"xs": [shared, 1]}, {"xs": [separate, 1]}).changes == []


def test_equal_each_compares_only_the_pairs_that_are_not_one_object():
    from lastgood.investigate.diff import _Fingerprints

    shared, deep_a, deep_b = {"id": 1}, [], []
    for _ in range(3000):  # beyond marshal's depth limit: the per-pair fallback answers
        deep_a, deep_b = [deep_a], [deep_b]
    fps = _Fingerprints()
    xs = [shared, {"a": 1}, {"a": 1}, deep_a]
    ys = [shared, {"a": 1}, {"a": 2}, deep_b]
    assert fps.equal_each(xs, ys) == [True, True, False, True]
    assert fps.equal_each(xs[:3], ys[:3]) == [True, True, False]
    assert fps.equal_each([shared], [shared]) == [True]


def test_lastgood_diff_of_two_langgraph_states_imports_no_pyarrow_or_numpy(tmp_path):
    """The command decodes two rows and diffs them: the listing's Arrow and numpy (~0.25 s of
    start-up) stay unimported, and the changes are those of the in-process diff."""
    import os
    import subprocess
    import sys

    from lastgood.index.catalog import Catalog
    from lastgood.investigate.history import diff_checkpoints
    from lastgood.stores import index_store
    from tests.helpers import lastgood_cli
    from tests.langgraph_graphs import write_sqlite_store

    db, home = tmp_path / "lg.sqlite", tmp_path / "home"
    history = write_sqlite_store(db, extra=False).expected[("tools-1", "")]
    first, last = history[-1]["checkpoint_id"], history[0]["checkpoint_id"]
    assert lastgood_cli("index", str(db), home=home).returncode == 0
    probe = ("import json, sys; from lastgood.cli.main import main\n"
             "sys.argv = ['lastgood', 'diff', *sys.argv[1:], '--format', 'json']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(json.dumps(['pyarrow' in sys.modules, 'numpy' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe, str(db), first, last], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, LASTGOOD_HOME=str(home)))
    assert done.returncode == 0, done.stderr
    *body, imported = done.stdout.splitlines()
    assert json.loads(imported) == [False, False]
    catalog = Catalog(home / "index.duckdb")
    expected, _, _ = diff_checkpoints(catalog, index_store(catalog, str(db)).store, first, last)
    catalog.close()
    assert expected.changes and json.loads("\n".join(body))["changes"] == expected.to_dict()["changes"]


def test_lastgood_diff_refreshes_the_index_only_when_it_cannot_name_both_checkpoints(tmp_path):
    """Full ids already indexed: the two rows are read from the store as they are, no listing.
    A checkpoint written since, or a prefix (which a newer checkpoint could make ambiguous),
    refreshes the index first."""
    import duckdb

    from lastgood.readers.native.writer import NativeWriter
    from tests.helpers import lastgood_cli, tree_digest

    url, home = str(tmp_path / "store"), tmp_path / "home"
    writer = NativeWriter(url, codec="json")
    first, second = (writer.save("run", {"n": n, "note": "x"}).checkpoint_id for n in (1, 2))
    assert lastgood_cli("index", url, home=home).returncode == 0

    def diff(a: str, b: str) -> dict:
        done = lastgood_cli("diff", url, a, b, "--format", "json", home=home)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["summary"]

    def indexed() -> int:
        with duckdb.connect(str(home / "index.duckdb"), read_only=True) as con:
            return con.execute("SELECT count(*) FROM checkpoints").fetchone()[0]

    third = writer.save("run", {"n": 5, "note": "x", "new": True}).checkpoint_id
    before = tree_digest(home)
    assert diff(first, f"run/{second}") == {"added": 0, "removed": 0, "changed": 1, "moved": 0}
    assert indexed() == 2 and tree_digest(home) == before  # nothing written to the index either
    assert diff(second, third) == {"added": 1, "removed": 0, "changed": 1, "moved": 0}
    assert indexed() == 3
    writer.save("run", {"n": 6})
    assert diff(first[:-1], second)["changed"] == 1
    assert indexed() == 4
    missing = lastgood_cli("diff", url, first, "nope", home=home)
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


def test_a_float_delta_has_no_binary_noise() -> None:
    result = diff_states({"t": 0.91, "n": 3, "big": 1e300}, {"t": 0.87, "n": 5, "big": -1e300})
    changes = {c.path: c for c in result.changes}
    assert changes["/t"].delta == -0.04 and changes["/n"].delta == 2 and changes["/big"].delta == -2e300
