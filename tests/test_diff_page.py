"""AppTest for the Diff page against the real demo store (tests/fixtures_browser.py), and the
"Compare with parent" link on the Timeline's checkpoint detail."""

from __future__ import annotations

import re

import json
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests.fixtures_browser import SECRET, DemoStore, build_demo_store, page_env
from tests.test_pages import pick_checkpoint, rendered_text

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
DIFF = "../pages/diff.py"
TIMELINE = "../pages/timeline.py"
TIMEOUT = 60


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("diffpage")
    return build_demo_store(base / "store", base / "home")


@pytest.fixture()
def app_env(demo: DemoStore, monkeypatch: pytest.MonkeyPatch) -> DemoStore:
    page_env(monkeypatch, demo.home, json.dumps([demo.url]))
    return demo


def diff_page(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    for key, value in (params or {}).items():
        at.query_params[key] = value
    at.switch_page(DIFF).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_default_is_the_newest_checkpoint_against_its_parent(app_env: DemoStore) -> None:
    at = diff_page()
    gamma = app_env.of_run("run-gamma")  # the most recent run; its newest checkpoint is the damaged one
    assert app_env.damaged == gamma[-1]
    assert at.selectbox(key="diff_run_b").options[0] == "run-gamma"
    assert at.selectbox(key="diff_ckpt_b").value == gamma[-2].checkpoint_id  # the newest with a state
    assert at.selectbox(key="diff_ckpt_a").value == gamma[-3].checkpoint_id
    assert not at.error
    at.selectbox(key="diff_run_b").select("run-alpha").run()  # another run: its newest, against its parent
    assert not at.exception, [e.value for e in at.exception]
    alpha = app_env.of_run("run-alpha")
    assert at.selectbox(key="diff_run_b").value == "run-alpha"
    assert at.selectbox(key="diff_ckpt_b").value == alpha[-1].checkpoint_id
    assert at.selectbox(key="diff_ckpt_a").value == alpha[-2].checkpoint_id
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"Added": "2", "Removed": "0", "Changed": "2", "Moved": "0"}
    # message text is escaped so it renders literally (no links, no markup): compare it unescaped
    shown = [(c.markdown[0].value, re.sub(r"\\(.)", r"\1", c.markdown[1].value)) for c in at.chat_message]
    assert shown == [(":green-badge[added · #10]", "run-alpha: please do task 5"),
                     (":green-badge[added · #11]", "Task 5 done (called `search`).")]
    assert [c.name for c in at.chat_message] == ["user", "assistant"]  # the role, as the avatar says it
    assert [e.label for e in at.expander if "unchanged" in e.label] == ["10 unchanged messages (#0–#9)"]
    text = rendered_text(at)
    assert "/plan/step" in text and SECRET not in text
    assert dict(at.query_params) == {"store": app_env.url, "a": alpha[-2].checkpoint_id,
                                     "b": alpha[-1].checkpoint_id}  # the URL reopens this diff


def test_a_link_with_a_and_b_opens_that_diff(app_env: DemoStore) -> None:
    beta = app_env.of_run("run-beta")
    at = diff_page({"store": app_env.url, "a": beta[1].checkpoint_id, "b": beta[4].checkpoint_id})
    assert at.selectbox(key="diff_run_b").value == "run-beta"
    assert at.selectbox(key="diff_ckpt_a").value == beta[1].checkpoint_id
    assert at.selectbox(key="diff_ckpt_b").value == beta[4].checkpoint_id
    assert {m.label: m.value for m in at.metric}["Added"] == "6"
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["data"][0]["y"] == [2, 4, 6, 8, 10, 12]  # len(/messages) at every step


def test_only_changes_off_shows_both_states_redacted(app_env: DemoStore) -> None:
    at = diff_page()
    at.toggle(key="diff_only").set_value(False).run()
    text = rendered_text(at)
    assert SECRET not in text
    tree = next(d.value for d in at.dataframe if "field" in d.value.columns)  # a readable tree, not raw JSON
    assert list(tree.columns) == ["field", "A", "B", "change", "path"]
    rows = dict(zip(tree["path"], zip(tree["A"], tree["B"], tree["change"])))
    assert rows["/tools/api_key"][:2] == ('"[redacted]"', '"[redacted]"')
    assert rows["/plan/step"][2] == "changed" and rows["/plan"][2] == "changes below"
    assert rows["/messages"][0].startswith("[…] ") and "/messages/0" not in rows  # folded: shown above
    assert any(f.endswith("└ api_key") for f in tree["field"])  # indented under tools


def test_picking_another_b_resets_a_to_its_parent_and_export_is_the_json_shape(app_env: DemoStore) -> None:
    at = diff_page()
    gamma = app_env.of_run("run-gamma")
    at.selectbox(key="diff_run_b").select("run-gamma").run()
    at.selectbox(key="diff_ckpt_b").select(gamma[2].checkpoint_id).run()
    assert not at.exception
    assert at.selectbox(key="diff_ckpt_a").value == gamma[1].checkpoint_id
    download = next(b for b in at.get("download_button") if b.proto.label == "Export JSON")  # beside "Download report"
    assert download.proto.label == "Export JSON"


def test_a_link_to_an_unknown_checkpoint_says_so_and_keeps_the_pickers(app_env: DemoStore) -> None:
    b = app_env.of_run("run-alpha")[-1].checkpoint_id
    at = diff_page({"store": app_env.url, "a": "no-such-checkpoint", "b": b})
    assert len(at.error) == 1 and at.error[0].value.startswith("A: no checkpoint matches 'no-such-checkpoint'")
    assert {"diff_run_a", "diff_ckpt_a", "diff_run_b", "diff_ckpt_b"} <= {s.key for s in at.selectbox}
    assert at.selectbox(key="diff_ckpt_b").value == b
    assert at.selectbox(key="diff_ckpt_a").value is None  # never silently another checkpoint
    assert not at.metric and not any("No changes" in x.value for x in at.success)  # nothing compared
    picked = app_env.of_run("run-alpha")[1].checkpoint_id
    at.selectbox(key="diff_run_a").select("run-alpha").run()
    at.selectbox(key="diff_ckpt_a").select(picked).run()  # A picked by hand: compared at last
    assert not at.error and at.metric and at.query_params["a"] == picked


@pytest.mark.parametrize("a, b", [("nope", "01a1"), ("nope", None), (None, "nope")])
def test_ids_that_match_nothing_or_several_are_refused(app_env: DemoStore, a: str | None, b: str | None) -> None:
    """``a=nope&b=01a1`` must not say "No changes" (nor fall back to another run's head): each side
    the link names that matches no checkpoint, or several, is refused with why."""
    ids = [s.checkpoint_id for s in app_env.saved]
    prefix = b if b != "nope" else None
    if prefix:  # a prefix every checkpoint shares: ambiguous
        b = ids[0][:2]
        assert all(i.startswith(b) for i in ids)
    at = diff_page({"store": app_env.url, **({"a": a} if a else {}), **({"b": b} if b else {})})
    errors = " ".join(e.value for e in at.error)
    if a:
        assert "A: no checkpoint matches 'nope'" in errors
    if b == "nope":
        assert "B: no checkpoint matches 'nope'" in errors
    elif b:
        assert "B: " in errors and "matches several checkpoints" in errors
    assert not at.metric and not at.success  # nothing compared, no "No changes"


def test_a_damaged_checkpoint_is_one_error_line(app_env: DemoStore) -> None:
    damaged = app_env.damaged
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    at.query_params.update({"store": app_env.url, "b": damaged.checkpoint_id})
    at.switch_page(DIFF).run()
    assert not at.exception
    assert [e.value for e in at.error] == [f"blob missing: blobs/run-gamma/{damaged.checkpoint_id}.json"]


def test_timeline_detail_links_to_compare_with_parent(app_env: DemoStore) -> None:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.switch_page(TIMELINE).run()
    chosen = app_env.of_run("run-alpha")[3]
    pick_checkpoint(at, "run-alpha", chosen.checkpoint_id)
    links = [e for e in at.get("page_link") if e.proto.label == "Compare with parent"]
    assert len(links) == 1
    href = links[0].proto.page
    assert href.endswith("diff") and chosen.parent_id in links[0].proto.query_string
    assert chosen.checkpoint_id in links[0].proto.query_string


# ---- the flow a person clicks through, in real Chromium ---------------------------------


def _metrics(page, wait_ms: int = 20_000) -> dict[str, str]:
    """The Diff page's four counts, once they are on screen (the page may still be rerunning)."""
    seen: dict[str, str] = {}
    for _ in range(wait_ms // 250):
        labels = page.get_by_test_id("stMetricLabel").all_inner_texts()
        values = page.get_by_test_id("stMetricValue").all_inner_texts()
        seen = {label.strip(): value.strip() for label, value in zip(labels, values)}
        if len(seen) == 4:
            return seen
        page.wait_for_timeout(250)
    return seen


@pytest.mark.browser
def test_compare_with_parent_in_chromium(chromium_browser, streamlit_server: str,
                                         browser_store: DemoStore, tmp_path: Path) -> None:
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(streamlit_server)
        page.get_by_role("link", name="Timeline").click()
        page.get_by_role("heading", name="Timeline").wait_for()
        chosen = browser_store.of_run("run-gamma")[3]
        page.get_by_test_id("stSelectbox").filter(has_text="Checkpoint").click()
        page.get_by_role("option", name=f"step {chosen.step} ").first.click()
        page.get_by_text(f"Checkpoint {chosen.checkpoint_id}").wait_for()

        page.get_by_role("link", name="Compare with parent").click()
        page.get_by_role("heading", name="Diff").wait_for()
        page.get_by_text("added · #6").wait_for()
        assert _metrics(page) == {"Added": "2", "Removed": "0", "Changed": "2", "Moved": "0"}
        body = page.inner_text("body")
        assert "run-gamma: please do task 3" in body and SECRET not in body
        assert f"a={chosen.parent_id}" in page.url and f"b={chosen.checkpoint_id}" in page.url
        page.screenshot(path=str(tmp_path / "diff.png"))

        shared = context.new_page()  # the URL alone reopens the same diff
        shared.set_default_timeout(30_000)
        shared.goto(page.url)
        shared.get_by_text("added · #6").wait_for()
        assert "run-gamma: please do task 3" in shared.inner_text("body")
    finally:
        context.close()


def test_runs_that_differ_show_their_first_divergence(app_env: DemoStore) -> None:
    alpha, beta = app_env.of_run("run-alpha"), app_env.of_run("run-beta")
    at = diff_page({"store": app_env.url, "a": alpha[4].checkpoint_id, "b": beta[4].checkpoint_id})
    at.button(key="diff_diverge").click().run()
    assert not at.exception
    assert any("First divergence at step 0" in w.value for w in at.warning)
    at.button(key="diff_show_divergence").click().run()
    assert at.selectbox(key="diff_ckpt_a").value == alpha[0].checkpoint_id
    assert at.selectbox(key="diff_ckpt_b").value == beta[0].checkpoint_id


def test_compare_with_keeps_a_while_b_is_picked(app_env: DemoStore) -> None:
    alpha, beta = app_env.of_run("run-alpha"), app_env.of_run("run-beta")
    at = diff_page({"store": app_env.url, "a": alpha[2].checkpoint_id, "b": alpha[2].checkpoint_id})
    assert any("No changes" in s.value for s in at.success)
    at.selectbox(key="diff_run_b").select("run-beta").run()
    at.selectbox(key="diff_ckpt_b").select(beta[3].checkpoint_id).run()
    assert at.selectbox(key="diff_ckpt_a").value == alpha[2].checkpoint_id  # not B's parent
    assert {m.label: m.value for m in at.metric}["Changed"] != "0"


def test_timeline_detail_links_to_compare_with(app_env: DemoStore) -> None:
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.switch_page(TIMELINE).run()
    chosen = app_env.of_run("run-alpha")[0]  # the first checkpoint: no parent, no "with parent" link
    pick_checkpoint(at, "run-alpha", chosen.checkpoint_id)
    labels = [e.proto.label for e in at.get("page_link")]
    assert "Compare with…" in labels and "Compare with parent" not in labels


def on_run(at: AppTest, run_id: str) -> AppTest:
    """B on ``run_id`` (its newest checkpoint with a state), A on its parent."""
    at.selectbox(key="diff_run_b").select(run_id).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_per_step_changes_of_the_run_on_demand(app_env: DemoStore) -> None:
    at = on_run(diff_page(), "run-alpha")
    at.toggle(key="diff_steps").set_value(True).run()
    assert not at.exception
    table = next(f.value for f in at.dataframe if "paths" in f.value.columns)
    assert list(table["step"]) == list(range(6))
    assert list(table["added"])[1:] == [2] * 5 and "/messages" in table["paths"][1]


def test_restore_rollback_and_quarantine_links_for_a_and_b(app_env: DemoStore) -> None:
    at = on_run(diff_page(), "run-alpha")
    alpha = app_env.of_run("run-alpha")
    restores = [e.proto for e in at.get("page_link") if e.proto.label == "Restore this"]
    targets = [str(p.query_string) for p in restores]
    assert len(restores) == 2
    assert alpha[-2].checkpoint_id in targets[0] and alpha[-1].checkpoint_id in targets[1]
    labels = {e.proto.label for e in at.get("page_link")}
    assert {"Rollback to here", "Quarantine"} <= labels


# ---- B from another store (?store_b=…) -----------------------------------------------------


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A LangGraph SQLite database written by real graphs, and a native store whose run ``copy``
    holds the state of the LangGraph thread ``tools-1``'s head (then one edited message)."""
    from lastgood.investigate import history as inv
    from lastgood.index.catalog import Catalog
    from lastgood.readers.native.writer import NativeWriter
    from lastgood.stores import index_store
    from tests.langgraph_graphs import write_sqlite_store

    base = tmp_path_factory.mktemp("storeb")
    written = write_sqlite_store(base / "lg.sqlite", extra=False)
    head = written.expected[("tools-1", "")][0]["checkpoint_id"]
    catalog = Catalog(base / "home" / "index.duckdb")
    lg = index_store(catalog, str(base / "lg.sqlite")).store
    state = lg.reader.load_state(inv.resolve_ref(catalog, lg.store_id, head))
    edited = json.loads(json.dumps(state))
    edited["messages"][1]["content"] = "a different answer"
    writer = NativeWriter(str(base / "native"), codec="json")
    same = writer.save("copy", state).checkpoint_id
    changed = writer.save("copy", edited).checkpoint_id
    index_store(catalog, str(base / "native"))
    catalog.close()
    return {"home": str(base / "home"), "native": str(base / "native"), "lg": lg.url, "head": head,
            "same": same, "changed": changed}


def test_b_from_another_store_by_link_and_by_picker(two_stores: dict[str, str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    s = two_stores
    monkeypatch.setenv("LASTGOOD_HOME", s["home"])
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([s["native"], s["lg"]]))
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)
    at = diff_page({"store": s["native"], "a": s["same"], "store_b": s["lg"], "b": s["head"]})
    assert at.selectbox(key="diff_store_b").value == s["lg"]
    assert at.selectbox(key="diff_run_b").value == "tools-1" and at.selectbox(key="diff_ckpt_b").value == s["head"]
    assert at.selectbox(key="diff_ckpt_a").value == s["same"]  # A stays in the native store
    assert any("No changes" in x.value for x in at.success)  # the native copy equals the LangGraph state
    assert dict(at.query_params) == {"store": s["native"], "a": s["same"], "store_b": s["lg"], "b": s["head"]}
    assert sorted(at.selectbox(key="diff_run_b").options) == sorted(["tools-1", "interrupt-1", "fork-1",
                                                                    "subgraph-1", "error-1", "delta-1"])

    at.selectbox(key="diff_ckpt_a").select(s["changed"]).run()  # A: the edited copy
    assert not at.exception
    assert {m.label: m.value for m in at.metric} == {"Added": "0", "Removed": "0", "Changed": "1", "Moved": "0"}

    picked = diff_page({"store": s["native"], "a": s["changed"], "b": s["changed"]})  # same store at first
    assert picked.selectbox(key="diff_store_b").value == ""
    assert "store_b" not in dict(picked.query_params)
    picked.selectbox(key="diff_store_b").select(s["lg"]).run()
    assert not picked.exception
    assert picked.selectbox(key="diff_run_b").value in picked.selectbox(key="diff_run_b").options
    assert picked.query_params["store_b"] == s["lg"] and picked.query_params["a"] == s["changed"]
    assert picked.selectbox(key="diff_ckpt_a").value == s["changed"]  # B's parent is not in A's store
    picked.selectbox(key="diff_store_b").select("").run()  # back to A's store: the link drops store_b
    assert "store_b" not in dict(picked.query_params)


def test_a_conversation_only_b_has_is_shown_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.readers.native.writer import NativeWriter
    from lastgood.stores import index_store

    writer = NativeWriter(str(tmp_path / "s"), codec="json")
    a = writer.save("r", {"input": "hi"}).checkpoint_id
    b = writer.save("r", {"input": "hi", "messages": [{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": "hello"}]}).checkpoint_id
    nested = writer.save("r2", {"input": "hi", "llm": {"messages": [{"role": "user", "content": "hi"}]}}).checkpoint_id
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    index_store(catalog, str(tmp_path / "s"))
    catalog.close()
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(tmp_path / "s")]))
    at = diff_page({"a": a, "b": b})
    assert any("only B has it" in c.value for c in at.caption)
    shown = pd.concat([d.value for d in at.dataframe if "change" in d.value.columns])
    assert list(shown["path"]) == ["/messages"] and list(shown["change"]) == ["added"]
    assert list(shown.columns) == ["change", "path", "A", "B"]  # no empty difference column (never None)
    at = diff_page({"a": a, "b": nested})  # the conversation sits under /llm, which only B has
    assert any("only B has it" in c.value and "/llm" in c.value for c in at.caption), [c.value for c in at.caption] + [m.value for m in at.markdown][:6]


def test_field_over_time_follows_the_conversation_until_a_path_is_typed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.readers.native.writer import NativeWriter
    from lastgood.stores import index_store

    writer = NativeWriter(str(tmp_path / "s"), codec="json")
    say = [{"role": "user", "content": "hi"}]
    for n in range(2):
        writer.save("nested", {"llm": {"messages": say * (n + 1)}})
    for n in range(2):
        writer.save("flat", {"messages": say * (n + 1), "count": n})
    catalog = Catalog(tmp_path / "home" / "index.duckdb")
    index_store(catalog, str(tmp_path / "s"))
    catalog.close()
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(tmp_path / "s")]))
    at = diff_page()
    assert at.text_input(key="diff_track").value == "/messages"  # the newest run: flat
    at.selectbox(key="diff_run_b").select("nested").run()
    assert at.text_input(key="diff_track").value == "/llm/messages"
    at.text_input(key="diff_track").input("/llm").run()
    at.selectbox(key="diff_run_b").select("flat").run()
    assert at.text_input(key="diff_track").value == "/llm" and not at.exception


def test_a_readers_own_message_shape_shows_as_a_conversation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenAI Agents session items are not ``{role, content}`` dicts: the reader's ``normalize_message``
    makes them a conversation (changed messages with the unchanged ones between them collapsed)."""
    import shutil

    from tests.helpers import lastgood_cli

    db = tmp_path / "openai.sqlite"
    shutil.copy(ROOT / "sample_data" / "openai_agents.sqlite", db)
    listed = json.loads(lastgood_cli("ls", str(db), "--format", "json", home=tmp_path / "home").stdout)
    run = listed[-1]["run_id"]
    ids = [r["checkpoint_id"] for r in listed if r["run_id"] == run]
    assert len(ids) >= 3
    monkeypatch.setenv("LASTGOOD_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(db)]))
    at = diff_page({"store": str(db), "a": ids[0], "b": ids[-1]})
    caption = next((m.value for m in at.markdown if m.value.startswith("**Conversation**")), None)
    assert caption is not None, [m.value for m in at.markdown][:5]
    assert at.chat_message and {c.name for c in at.chat_message} <= {"user", "assistant"}
    badges = [c.markdown[0].value for c in at.chat_message]  # the caption counts what the badges say
    assert caption.endswith(": " + ", ".join(f"{n} {kind}" for kind in ("added", "removed", "edited", "moved")
                                             if (n := sum(kind in b for b in badges))))
    assert all("added" in c.markdown[0].value or "edited" in c.markdown[0].value or "removed" in c.markdown[0].value
               or "moved" in c.markdown[0].value for c in at.chat_message)


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A copy of the sample Trainer run whose newest checkpoint got NaN written into one tensor, fully
    read (tensor statistics in the index): (run folder, LASTGOOD_HOME, the poisoned tensor)."""
    import shutil

    from tests.helpers import lastgood_cli
    from tests.training_stores import write_into_tensor

    base = tmp_path_factory.mktemp("trainer")
    run = base / "run"
    shutil.copytree(ROOT / "sample_data" / "training" / "hf_trainer", run)
    poisoned = write_into_tensor(run / "checkpoint-40" / "model.safetensors", value=float("nan"))
    done = lastgood_cli("verify", str(run), "--read-data", home=base / "home")
    assert done.returncode == 0 and "non-finite" in done.stdout, done.stderr  # the NaN: a warning finding
    return run, base / "home", poisoned


def test_training_checkpoints_are_compared_tensor_by_tensor(trainer_run: tuple[Path, Path, str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Trainer checkpoints: a table of every tensor, the most changed first, a NaN that appeared
    highlighted and said, and a per-layer bar chart."""
    run, home, poisoned = trainer_run
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(run)]))
    at = diff_page({"store": str(run), "a": "checkpoint-32", "b": "checkpoint-40"})
    assert any(s.value == "Tensors" for s in at.subheader)
    table = next(d.value for d in at.dataframe if "relative change" in d.value.columns)
    assert table.iloc[0]["tensor"] == poisoned and table.iloc[0]["change"] == "NaN appeared"
    changes = table.iloc[1:]["relative change"].dropna().tolist()
    assert changes == sorted(changes, reverse=True)  # then sorted by change
    assert any("NaN appeared in 1 tensor(s)" in e.value for e in at.error)
    assert at.get("plotly_chart")  # the change per layer


def test_a_training_checkpoint_shows_its_tensors_in_the_checkpoint_view(trainer_run: tuple[Path, Path, str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The Timeline's checkpoint view of a training checkpoint: its tensors (dtype, shape, statistics
    after the full read) in the first tab, the one holding NaN listed first and said, then its files
    and trainer state."""
    run, home, poisoned = trainer_run
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", json.dumps([str(run)]))
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    for key, value in {"store": str(run), "run": "run", "checkpoint": "checkpoint-40"}.items():
        at.query_params[key] = value
    at.switch_page(TIMELINE).run()
    assert not at.exception, [e.value for e in at.exception]
    labels = [t.label for t in at.tabs]
    assert labels[:3] == [labels[0], "Files", "Trainer state"] and re.fullmatch(r"Tensors \(\d+\)", labels[0]), labels
    table = next(d.value for d in at.dataframe if {"tensor", "dtype", "shape", "NaN"} <= set(d.value.columns))
    assert len(table) == int(labels[0][9:-1]) and table.iloc[0]["tensor"] == poisoned and table.iloc[0]["NaN"] == 3
    assert any("NaN/Inf value(s) in this checkpoint's tensors" in e.value for e in at.error)
