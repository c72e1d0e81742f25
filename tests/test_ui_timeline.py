"""The Timeline as an incident console, under AppTest: lanes for many runs, sub-lanes and fork edges
(LangGraph's sample store), the node that produced each checkpoint, next/previous problem, search,
runs waiting on a human, every view as a link (secret-shaped ids only as handles), the marks a
rollback leaves, training metrics, and the live refresh."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from lastgood.config import load_settings
from lastgood.index.queries import checkpoint_handle, run_handle
from lastgood.readers.native.writer import NativeWriter
from lastgood.stores import index_store, open_catalog
from lastgood.ui import live, timeline
from tests.fixtures_browser import SECRET, DemoStore, build_demo_store
from tests.helpers import lastgood_cli

ROOT = Path(__file__).resolve().parents[1]
ENTRY = str(ROOT / "app" / "streamlit_app.py")
TIMELINE = "../pages/timeline.py"
TIMEOUT = 60
SUBGRAPH_RUN, FORK_RUN = "research-subgraph-001", "research-fork-001"


def indexed_home(base: Path, *stores: str) -> Path:
    """A Lastgood home holding the index of copies of these sample stores (copies: nothing reads the
    repository's files while another test rewrites them)."""
    home = base / "home"
    catalog = open_catalog(load_settings(home))
    for name in stores:
        source = ROOT / "sample_data" / name
        copy = base / Path(name).name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, copy)
        index_store(catalog, str(copy))
    return home


@pytest.fixture(scope="module")
def langgraph(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("tl-langgraph")
    return indexed_home(base, "langgraph.sqlite"), str(base / "langgraph.sqlite")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoStore:
    base = tmp_path_factory.mktemp("tl-demo")
    return build_demo_store(base / "store", base / "home")


def use(monkeypatch: pytest.MonkeyPatch, home: Path, url: str) -> None:
    monkeypatch.setenv("LASTGOOD_HOME", str(home))
    monkeypatch.setenv("LASTGOOD_STORES", url)
    monkeypatch.delenv("LASTGOOD_ALLOW_WRITE", raising=False)


def timeline_app(**params: Any) -> AppTest:
    """The Timeline, opened by its link when ``params`` are given (as a browser opening the URL)."""
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT)
    at.run()
    for name, value in params.items():
        at.query_params[name] = value
    at.switch_page(TIMELINE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def figure(at: AppTest) -> dict[str, Any]:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def traces(at: AppTest, name_part: str) -> list[dict[str, Any]]:
    return [t for t in figure(at)["data"] if name_part in str(t.get("name", ""))]


def tick_labels(at: AppTest) -> list[str]:
    return list(figure(at)["layout"]["yaxis"]["ticktext"])


def numbers(value: Any) -> list[Any]:
    """A Plotly spec's array: a list, or numbers Plotly sent as typed binary (``{dtype, bdata}``)."""
    if isinstance(value, dict) and "bdata" in value:
        import base64

        import numpy as np

        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value)


def segments(trace: dict[str, Any]) -> int:
    return sum(1 for x in trace["x"] if x is None)


def selected(at: AppTest) -> str | None:
    return at.selectbox(key=timeline.CHECKPOINT).value or at.text_input(key=timeline.TYPED_REF).value or None


def url(at: AppTest) -> dict[str, list[str]]:
    return {k: at.query_params[k] if isinstance(at.query_params[k], list) else [at.query_params[k]]
            for k in at.query_params}


# ---- lanes --------------------------------------------------------------------------------------


def test_runs_are_lanes_with_subgraph_sub_lanes_and_fork_branches(langgraph, monkeypatch) -> None:
    home, store = langgraph
    use(monkeypatch, home, store)
    at = timeline_app()
    assert at.selectbox(key=timeline.RUN).value == "All runs"  # lanes for the most recent runs
    labels = tick_labels(at)
    assert f"<b>{SUBGRAPH_RUN}</b>" in labels and f"<b>{FORK_RUN}</b>" in labels
    assert sum("tools:" in label for label in labels) == 8  # LangGraph subgraph namespaces as sub-lanes
    assert sum("↳ fork" in label for label in labels) == 2  # the fork's two branches
    links = traces(at, "sub-lane started from")
    assert len(links) == 1 and segments(links[0]) == 8  # each subgraph linked to the checkpoint it started from
    forks = traces(at, "fork: branch")
    assert len(forks) == 1 and segments(forks[0]) == 2
    bands = [t for t in figure(at)["data"] if str(t.get("name", "")).endswith("band")]
    assert {t["name"] for t in bands} == {"run band", "namespace band", "branch band"}
    events = [t["name"] for t in figure(at)["data"] if t.get("legendgroup") == "events"]
    assert {"error", "interrupt", "resume"} <= set(events)
    statuses = {t["marker"]["symbol"] for t in figure(at)["data"] if t.get("legendgroup") == "status"}
    assert not statuses & {t["marker"]["symbol"] for t in figure(at)["data"] if t.get("legendgroup") == "events"}


def test_a_single_run_shows_the_node_that_produced_each_checkpoint(langgraph, monkeypatch) -> None:
    home, store = langgraph
    use(monkeypatch, home, store)
    at = timeline_app(run=FORK_RUN)
    assert at.selectbox(key=timeline.RUN).value == FORK_RUN
    hovers = [h for t in traces(at, "ok") for h in t["hovertext"]]
    assert any("node <b>fork</b>" in h and "fork" in h.split("<br>")[0] for h in hovers)
    assert any("node <b>update</b>" in h for h in hovers)
    texts = [x for t in traces(at, "ok") for x in t.get("text") or []]
    assert {"fork", "update", "agent", "tools"} <= set(texts) and "loop" not in texts  # beside the points when few
    at.segmented_control(key=timeline.AXIS).set_value("step").run()
    assert figure(at)["layout"]["xaxis"]["title"]["text"] == "step"
    assert url(at)["axis"] == ["step"] and url(at)["run"] == [FORK_RUN]


def test_langgraph_checkpoints_are_named_by_the_node_whose_task_wrote_them(langgraph, monkeypatch) -> None:
    home, store = langgraph
    use(monkeypatch, home, store)
    at = timeline_app(run=SUBGRAPH_RUN)  # LangGraph >= 0.3 keeps no ``writes`` in metadata: only "loop"
    hovers = [h for t in traces(at, "ok") for h in t["hovertext"]]
    nodes = {h.split("node <b>")[1].split("</b>")[0] for h in hovers}
    assert {"agent", "tools", "run_tool", "reflect", "input"} <= nodes and "loop" not in nodes
    parent = [h for h in hovers if "tools:" not in h.split("<br>")[0]]  # the root lane: agent and tools alternate
    assert {h.split("node <b>")[1].split("</b>")[0] for h in parent} >= {"agent", "tools"}
    sub = [h for h in hovers if "tools:" in h.split("<br>")[0]]
    assert {h.split("node <b>")[1].split("</b>")[0] for h in sub} >= {"run_tool", "reflect"}
    assert any("· run_tool ·" in label for label in at.selectbox(key=timeline.CHECKPOINT).options)


# ---- problems -----------------------------------------------------------------------------------


def test_next_and_previous_problem_select_damaged_checkpoints_and_error_events(demo, monkeypatch) -> None:
    use(monkeypatch, demo.home, demo.url)
    at = timeline_app()
    error_at = demo.of_run("run-beta")[3].checkpoint_id  # the error event's checkpoint
    assert at.button(key=timeline.NEXT).disabled is False
    at.button(key=timeline.NEXT).click().run()
    assert selected(at) == error_at  # the first problem in time
    assert at.session_state[timeline.FOCUS]["checkpoint_id"] == error_at  # the chart is centred on it
    assert figure(at)["layout"]["xaxis"]["range"]  # …its view moved there
    assert any(error_at in s.value for s in at.subheader)
    at.button(key=timeline.NEXT).click().run()
    assert selected(at) == demo.damaged.checkpoint_id
    assert at.button(key=timeline.NEXT).disabled  # the newest problem
    assert any("problem 2 of 2 (corrupt)" in c.value for c in at.caption)
    at.button(key=timeline.PREVIOUS).click().run()
    assert selected(at) == error_at
    assert url(at)["checkpoint"] == [error_at]


def test_an_inspect_from_the_overview_lands_on_the_runs_damaged_checkpoint(demo, monkeypatch) -> None:
    use(monkeypatch, demo.home, demo.url)
    at = AppTest.from_file(ENTRY, default_timeout=TIMEOUT).run()
    at.run()
    at.button(key="action-0").click().run()  # "1 corrupt checkpoint in run run-gamma": one click
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Timeline"
    assert at.selectbox(key=timeline.RUN).value == "run-gamma"
    assert selected(at) == demo.damaged.checkpoint_id
    assert any(demo.damaged.checkpoint_id in s.value for s in at.subheader)


# ---- search and waiting ---------------------------------------------------------------------------


def test_search_finds_runs_checkpoint_prefixes_and_metadata_and_opens_the_hit(langgraph, monkeypatch) -> None:
    home, store = langgraph
    use(monkeypatch, home, store)
    at = timeline_app()
    at.text_input(key="tl_search").input("research-fork").run()
    assert at.button(key="tl_hit_0").label.startswith("run **research-fork-001**")
    at.button(key="tl_hit_0").click().run()
    assert at.selectbox(key=timeline.RUN).value == FORK_RUN and selected(at) is None
    at.text_input(key="tl_search").input("source=update").run()  # metadata key=value (JSON)
    hit = at.button(key="tl_hit_0")
    assert "checkpoint" in hit.label and "metadata match" in hit.label
    hit.click().run()
    chosen = selected(at)
    assert chosen and at.selectbox(key=timeline.RUN).value == FORK_RUN
    assert url(at)["q"] == ["source=update"] and url(at)["checkpoint"] == [chosen]
    at.text_input(key="tl_search").input(chosen[:18]).run()  # a checkpoint id prefix
    assert any(chosen[:13] in b.label for b in at.button if b.key and b.key.startswith("tl_hit_"))
    at.text_input(key="tl_search").input("no-such-thing-here").run()
    assert any("Nothing matches" in c.value for c in at.caption)


def test_runs_waiting_on_a_human_are_listed_with_their_question(tmp_path, monkeypatch) -> None:
    home = indexed_home(tmp_path, "agno.sqlite")
    use(monkeypatch, home, str(tmp_path / "agno.sqlite"))
    at = timeline_app()
    waiting = [e for e in at.expander if "waiting on a human" in e.label]
    assert len(waiting) == 1 and waiting[0].label.endswith("1 run(s) waiting on a human")
    text = " ".join(m.value for m in waiting[0].markdown)
    assert "**cart-002**" in text and "need confirmation" in text
    at.button(key="tl_waiting_0").click().run()
    assert at.selectbox(key=timeline.RUN).value == "cart-002" and selected(at)

    home = indexed_home(tmp_path / "graph", "pydantic_graph")  # no agent recorded: nothing between separators
    use(monkeypatch, home, str(tmp_path / "graph" / "pydantic_graph"))
    waiting = [e for e in timeline_app().expander if "waiting on a human" in e.label]
    text = " ".join(m.value for m in waiting[0].markdown)
    assert "**run\\_64af0c25** · asked " in text and "· - ·" not in text


# ---- every view is a link -------------------------------------------------------------------------


def test_a_link_reproduces_the_view_and_follows_every_selection(demo, monkeypatch) -> None:
    use(monkeypatch, demo.home, demo.url)
    chosen = demo.of_run("run-alpha")[2]
    at = timeline_app(store=demo.url, agent="planner", run="run-alpha", checkpoint=chosen.checkpoint_id,
                      axis="step", status=["ok"], q="run-al")
    assert at.selectbox(key=timeline.AGENT).value == "planner"
    assert at.selectbox(key=timeline.RUN).value == "run-alpha"
    assert at.segmented_control(key=timeline.AXIS).value == "step"
    assert at.multiselect(key=timeline.STATUS).value == ["ok"]
    assert at.text_input(key="tl_search").value == "run-al"
    assert selected(at) == chosen.checkpoint_id
    assert url(at) == {"store": [demo.url], "agent": ["planner"], "run": ["run-alpha"], "status": ["ok"],
                       "axis": ["step"], "q": ["run-al"], "checkpoint": [chosen.checkpoint_id]}
    other = demo.of_run("run-alpha")[4]
    at.selectbox(key=timeline.CHECKPOINT).select(other.checkpoint_id).run()  # the operator's click wins
    assert url(at)["checkpoint"] == [other.checkpoint_id] and selected(at) == other.checkpoint_id
    at.selectbox(key=timeline.AGENT).select("All agents").run()
    assert "agent" not in url(at) and at.selectbox(key=timeline.RUN).value == "run-alpha"


def test_a_link_selects_a_checkpoint_of_a_subgraph_namespace(langgraph, monkeypatch) -> None:
    home, store = langgraph
    use(monkeypatch, home, store)
    at = timeline_app(run=SUBGRAPH_RUN)
    points = [(h.split("<br>")[0], c[0]) for t in traces(at, "ok") for h, c in zip(t["hovertext"], t["customdata"])]
    first, picked = next((line, c) for line, c in points if "tools:" in line and "step 1" in line)
    at.selectbox(key=timeline.CHECKPOINT).select(picked).run()  # a checkpoint of a subgraph
    shown = url(at)
    namespace, chosen = shown["ns"][0], shown["checkpoint"][0]
    assert chosen == picked and namespace.startswith("tools:") and namespace in first
    assert shown["run"] == [SUBGRAPH_RUN]
    reopened = timeline_app(store=store, run=SUBGRAPH_RUN, checkpoint=chosen, ns=namespace)
    assert selected(reopened) == chosen and url(reopened) == shown
    assert any(namespace in s.value or chosen in s.value for s in reopened.subheader)


def test_a_secret_shaped_run_and_checkpoint_travel_only_as_handles(tmp_path, monkeypatch) -> None:
    run, step0 = f"run-{SECRET}", None
    writer = NativeWriter(str(tmp_path / "store"))
    saved = [writer.save(run, {"x": i}, agent="a", step=i) for i in range(3)]
    index_store(open_catalog(load_settings(tmp_path / "home")), str(tmp_path / "store"))
    use(monkeypatch, tmp_path / "home", str(tmp_path / "store"))
    at = timeline_app()
    at.selectbox(key=timeline.RUN).select(run_handle(run)).run()
    at.selectbox(key=timeline.CHECKPOINT).select(saved[1].checkpoint_id).run()
    shown = url(at)
    assert shown["run"] == [run_handle(run)] and SECRET not in json.dumps(shown)
    assert shown["checkpoint"] == [saved[1].checkpoint_id]
    reopened = timeline_app(**{k: v if len(v) > 1 else v[0] for k, v in shown.items()})
    assert reopened.selectbox(key=timeline.RUN).value == run_handle(run)
    assert selected(reopened) == saved[1].checkpoint_id
    assert step0 is None and checkpoint_handle(run, "", saved[1].checkpoint_id).startswith("key:")


# ---- after a rollback, training runs, live ------------------------------------------------------------


def test_after_a_rollback_the_new_head_and_the_superseded_checkpoints_are_marked(tmp_path, monkeypatch) -> None:
    demo = build_demo_store(tmp_path / "store", tmp_path / "home", damage=False)
    target = demo.of_run("run-beta")[2]
    done = lastgood_cli("rollback", demo.url, "run-beta", "--to", target.checkpoint_id, "--reason", "bad tool call",
                        "--yes", home=demo.home, env={"LASTGOOD_ALLOW_WRITE": "1"})
    assert done.returncode == 0, done.stderr
    use(monkeypatch, demo.home, demo.url)
    at = timeline_app(run="run-beta")
    superseded = traces(at, "superseded")
    assert len(superseded) == 1 and len(superseded[0]["x"]) == 3 and superseded[0]["opacity"] < 0.5
    heads = traces(at, "head (what resumes)")
    assert len(heads) == 1 and len(heads[0]["x"]) == 1
    assert traces(at, "rollback (journal)")  # the action itself, on the events band
    hovers = [h for t in traces(at, "ok") for h in t["hovertext"] if "head" in h.split("<br>")[0]]
    assert len(hovers) == 1 and "run-beta" in hovers[0]


def test_a_training_run_shows_its_logged_metrics_with_checkpoints_and_the_best(tmp_path, monkeypatch) -> None:
    home = indexed_home(tmp_path, "training/hf_trainer")
    use(monkeypatch, home, str(tmp_path / "hf_trainer"))
    at = timeline_app()
    charts = at.get("plotly_chart")
    assert len(charts) == 2 and any("Logged metrics" in s.value for s in at.subheader)
    spec = json.loads(charts[1].proto.spec)
    names = {t.get("name") for t in spec["data"]}
    assert {"loss", "learning_rate", "grad_norm", "eval_loss", "best checkpoint"} <= names
    best = next(t for t in spec["data"] if t.get("name") == "best checkpoint")
    assert numbers(best["x"]) == [16]  # the trainer's best (checkpoint-16)
    marks = [t for t in spec["data"] if t.get("legendgroup") == "status"]
    assert sum(len(numbers(t["x"])) for t in marks) == 5  # every checkpoint marked


def test_live_refresh_picks_up_new_checkpoints_without_a_full_reindex(tmp_path, monkeypatch) -> None:
    demo = build_demo_store(tmp_path / "store", tmp_path / "home", damage=False)
    use(monkeypatch, demo.home, demo.url)
    at = timeline_app(live="5s")
    assert at.sidebar.segmented_control(key=live.LIVE_KEY).value == "5s" and url(at)["live"] == ["5s"]
    before = sum(t["x"].__len__() for t in figure(at)["data"] if t.get("legendgroup") == "status")
    NativeWriter(demo.url, create=False).save("run-alpha", {"x": "new"}, agent="planner", step=99)
    once = iter([True])
    monkeypatch.setattr(live, "due", lambda ref, seconds, now=None: next(once, False))  # an interval passed
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    after = sum(len(t["x"]) for t in figure(at)["data"] if t.get("legendgroup") == "status")
    assert after == before + 1
    assert any("1 new checkpoint(s)" in c.value for c in at.sidebar.caption)
    monkeypatch.setattr(live, "due", lambda ref, seconds, now=None: True)
    at.run()  # nothing new: no cache cleared, nothing redrawn
    assert any("no change" in c.value for c in at.sidebar.caption)


def test_live_waits_one_interval_before_refreshing(demo, monkeypatch) -> None:
    from lastgood.ui.stores import StoreRef

    state: dict[str, Any] = {}
    monkeypatch.setattr(live.st, "session_state", state)
    ref = StoreRef("index", "store-a", 1)
    assert live.due(ref, 5, now=100.0) is False  # the page was just drawn from the index
    assert live.due(ref, 5, now=102.0) is False
    assert live.due(ref, 5, now=105.0) is True and live.due(ref, 5, now=106.0) is False
    assert live.due(StoreRef("index", "store-b", 2), 5, now=107.0) is False  # another store: its clock starts


def test_a_timeout_event_never_looks_like_an_incomplete_checkpoint() -> None:
    from lastgood.display.lanes import EVENT_STYLE, STATUS_STYLE
    from lastgood.readers.base import Status

    colour, symbol, _, _ = STATUS_STYLE[Status.INCOMPLETE]
    assert EVENT_STYLE["timeout"][0] != colour and EVENT_STYLE["timeout"][1] != symbol
    statuses = {s[1] for s in STATUS_STYLE.values()}
    assert not statuses & {glyph for _, glyph in EVENT_STYLE.values()}  # no event shares a status's shape


def test_node_labels_that_would_overlap_are_left_out_along_each_lane() -> None:
    """Beside a few points the node is written, but not where the lane's previous label is nearer than
    a share of the x span (they would overprint each other), nor the same node again close by."""
    import pandas as pd

    from lastgood.display.lanes import STEP, TIME, spaced_labels

    t0 = pd.Timestamp("2026-11-03 09:00", tz="UTC")
    at = [pd.Timedelta(s) for s in ("0s", "10s", "3h", "3h1min", "0s", "2h")]
    points = pd.DataFrame({"y": [0, 0, 0, 0, 1, 1], "node": ["a", "b", "a", "c", "a", None],
                           "created_at": [t0 + d for d in at], "step": [0, 1, 2, 3, 0, 1]})
    assert spaced_labels(points, TIME) == ["a", "", "a", "", "a", ""]  # 10 s and 1 min after a label: crowded
    assert spaced_labels(points.iloc[::-1].reset_index(drop=True), TIME) == ["", "a", "", "a", "", "a"]
    assert spaced_labels(points, STEP) == ["a", "b", "a", "c", "a", ""]  # one step apart of three: room
