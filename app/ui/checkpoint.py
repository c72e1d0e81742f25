"""One checkpoint, as the Timeline shows it: metadata, findings, events, pending writes, links to
act on it or compare it, and its (redacted) state — chat messages as a conversation, then the tree.
The tab shown is part of the Timeline's link (``tab=findings``; lastgood.ui.tabs)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from lastgood.cli.output import dumps, human_bytes
from lastgood.display.figures import DAMAGED, utc
from lastgood.errors import LastgoodError
from lastgood.investigate.stateview import (
    Normalize,
    find_conversation,
    get_path,
    message_normalizer,
    order_channels,
    tool_call,
    truncate,
    without_path,
)
from lastgood.ui import stores
from lastgood.ui import tabs as ui_tabs
from lastgood.ui.escape import code, literal_lines, md_escape
from lastgood.ui.navigation import page_path
from lastgood.ui.stores import StoreRef
from lastgood.ui.tables import export_buttons, show_table

DIFF_PAGE = page_path("diff")
MAX_MESSAGES = 50
CONVERSATION_HEIGHT = 420
BADGE_COLORS = {"ok": "green", "corrupt": "red", "incomplete": "orange", "quarantined": "violet",
                "superseded": "gray"}


def render_checkpoint(ref: StoreRef, checkpoint: str) -> None:
    """Metadata, findings, events, pending writes and the (redacted) state of one checkpoint."""
    result = stores.checkpoint(ref, checkpoint)
    c = result["checkpoint"]
    _render_header(c)
    _render_fields(c, result.get("head"))
    # the Recovery page's module (pandas, lastgood.recovery) loads with the first checkpoint shown,
    # not before the Timeline's first screen
    from lastgood.ui.recovery import recovery_links

    recovery_links(ref, c)
    _compare_links(ref, c)
    _render_tabs(result, _normalizer(ref))


def _normalizer(ref: StoreRef) -> Normalize | None:
    """The store's reader's own message shape made plain (OpenAI items, ADK events…), if it has one."""
    try:
        return message_normalizer(stores.cached_store(ref.index_path, ref.url).reader)
    except (LastgoodError, OSError):  # the store cannot be opened: the index's view, plain messages
        return None


def _render_header(c: dict[str, Any]) -> None:
    st.subheader(f"Checkpoint {code(c['checkpoint_id'])}")
    st.badge(c["status"], color=BADGE_COLORS.get(c["status"], "gray"))
    if c.get("status_reason"):
        (st.error if c["status"] in DAMAGED else st.info)(f"{c['status']}: {md_escape(c['status_reason'])}")
    if c.get("data_checked") is False and c["status"] not in DAMAGED:
        st.caption(":material/hourglass_top: Data check pending: its blob was not decoded by a data check yet, "
                   "so its status comes from the listing and structure checks.")


def _render_fields(c: dict[str, Any], head: str | None) -> None:
    rows = [("run", c["run_id"] + (f" [{c['namespace']}]" if c.get("namespace") else "")),
            ("created (UTC)", utc(c.get("created_at"))), ("size", human_bytes(c.get("size_bytes"))),
            ("agent", c.get("agent") or "-"), ("trigger", c.get("trigger") or "-"),
            ("codec", c.get("codec") or "-"), ("step", str(c.get("step"))),
            ("kind", c.get("kind") or "-"), ("parent", c.get("parent_id") or "-")]
    columns = st.columns(3)
    for i, (label, value) in enumerate(rows):
        columns[i % 3].markdown(f"**{label}** &nbsp; {code(value)}")
    role = "this is the run's head" if head == c["checkpoint_id"] else f"run head: {code(head or '-')}"
    st.caption(f"{role} · checksum {code(c.get('checksum') or '-')} · location {code(c.get('location') or '-')}")


def _compare_links(ref: StoreRef, c: dict[str, Any]) -> None:
    compare = st.columns(4)
    if c.get("parent_id"):
        compare[0].page_link(DIFF_PAGE, label="Compare with parent", icon=":material/difference:",
                             query_params={"store": ref.url, "a": c["parent_id"], "b": c["checkpoint_id"]})
    compare[1].page_link(DIFF_PAGE, label="Compare with…", icon=":material/compare_arrows:",
                         query_params={"store": ref.url, "a": c["checkpoint_id"], "b": c["checkpoint_id"]})


def _render_tabs(result: dict[str, Any], normalize: Normalize | None = None) -> None:
    import pandas as pd

    if "tensors" in result:  # a training checkpoint (its reader lists tensors)
        _render_training_tabs(result)
        return
    tabs = ui_tabs.linked_tabs(ui_tabs.CHECKPOINT, [
        ("state", "State"), ("findings", f"Findings ({len(result['findings'])})"),
        ("events", f"Events ({len(result['events'])})"),
        ("writes", f"Pending writes ({len(result['pending_writes'])})"), ("metadata", "Metadata")])
    with tabs[0]:
        if result.get("state_error"):
            st.warning(f"The state cannot be shown: {md_escape(str(result['state_error']))}")
        else:
            render_state(result["state"], normalize)
    with tabs[1]:
        show_table(pd.DataFrame(result["findings"]), ["severity", "check", "message"],
                   empty="No findings: every check passed.", name="checkpoint-findings")
    with tabs[2]:
        show_table(pd.DataFrame(result["events"]), ["created_at", "kind", "channel", "task_id", "message"],
                   empty="No events recorded on this checkpoint.", name="checkpoint-events")
    with tabs[3]:
        _render_writes(result["pending_writes"])
    with tabs[4]:
        st.json(dumps(result["checkpoint"].get("metadata") or {}), expanded=2)


def _render_training_tabs(result: dict[str, Any]) -> None:
    """A training checkpoint: its tensors (statistics after a full read), files, trainer state and
    metadata (the metrics logged at its step), findings and events."""
    import pandas as pd

    state = result.get("state") if isinstance(result.get("state"), dict) else {}
    trainer = state.get("trainer_state")
    tabs = ui_tabs.linked_tabs(ui_tabs.CHECKPOINT, [
        ("tensors", f"Tensors ({len(result['tensors'])})"), ("files", "Files"),
        ("state", "Trainer state" if trainer else "Training state"), ("metadata", "Metadata"),
        ("findings", f"Findings ({len(result['findings'])})"), ("events", f"Events ({len(result['events'])})")])
    with tabs[0]:
        _render_tensors(result["tensors"])
    with tabs[1]:
        _render_files(state.get("files") or (result["checkpoint"].get("metadata") or {}).get("files"))
    with tabs[2]:
        if result.get("state_error"):
            st.warning(f"The state cannot be shown: {md_escape(str(result['state_error']))}")
        else:
            rest = trainer if trainer else {k: v for k, v in state.items() if k not in ("files", "tensors")}
            _render_trainer_state(rest)
    with tabs[3]:
        _render_metadata(result["checkpoint"].get("metadata") or {})
    with tabs[4]:
        show_table(pd.DataFrame(result["findings"]), ["severity", "check", "message"],
                   empty="No findings: every check passed.", name="checkpoint-findings")
    with tabs[5]:
        show_table(pd.DataFrame(result["events"]), ["created_at", "kind", "channel", "task_id", "message"],
                   empty="No events recorded on this checkpoint.", name="checkpoint-events")


def _render_tensors(tensors: list[dict[str, Any]]) -> None:
    import pandas as pd

    from lastgood.display.tensors import checkpoint_tensor_rows

    if not tensors:
        st.caption("No tensors listed (the checkpoint's tensor files cannot be read, or it holds none).")
        return
    rows = pd.DataFrame(checkpoint_tensor_rows(tensors))
    if rows["NaN"].isna().all():
        st.caption(":material/hourglass_top: Name, dtype, shape and size from the headers; statistics (NaN and "
                   "±Inf counts, min, max, mean, std, norm) after a full read (Integrity → Full read, or "
                   "`lastgood verify --read-data`).")
        rows = rows[["tensor", "dtype", "shape", "size"]]
    bad = int(rows["NaN"].fillna(0).sum() + rows["±Inf"].fillna(0).sum()) if "NaN" in rows else 0
    if bad:
        st.error(f"{bad:,} NaN/Inf value(s) in this checkpoint's tensors (listed first).", icon=":material/warning:")
    styled = rows.style.apply(lambda r: ["background-color: #fde2e1" if (r.get("NaN") or 0) or (r.get("±Inf") or 0)
                                         else "" for _ in r], axis=1)
    st.dataframe(styled, hide_index=True, width="stretch",
                 column_config={c: st.column_config.NumberColumn(c, format="%.4g")
                                for c in ("min", "max", "mean", "std", "norm")})
    export_buttons(rows, "checkpoint-tensors")


def _render_files(files: Any) -> None:
    import pandas as pd

    if isinstance(files, dict):
        rows = [{"file": name, "size": human_bytes(size) if isinstance(size, int) else str(size)}
                for name, size in sorted(files.items())]
    elif isinstance(files, list):
        rows = [{"file": str(name), "size": ""} for name in files]
    else:
        st.caption("No file list recorded for this checkpoint.")
        return
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="content")


def _render_trainer_state(state: Any) -> None:
    """Scalars as a two-column table, the rest (logged metrics, callbacks…) as a tree."""
    import pandas as pd

    if not isinstance(state, dict) or not state:
        st.caption("Nothing more recorded for this checkpoint.")
        return
    scalars = {k: v for k, v in state.items() if not isinstance(v, (dict, list))}
    if scalars:
        st.dataframe(pd.DataFrame({"field": list(scalars), "value": [dumps(v, indent=None) for v in scalars.values()]}),
                     hide_index=True, width="content")
    logged = state.get("logged_at_step")
    if isinstance(logged, list) and logged and all(isinstance(r, dict) for r in logged):
        st.markdown("**Logged at this step**")
        st.dataframe(pd.DataFrame(logged), hide_index=True, width="stretch")
    rest = {k: v for k, v in state.items() if isinstance(v, (dict, list)) and k != "logged_at_step"}
    if rest:
        st.json(dumps(truncate(rest)), expanded=1)


def _render_metadata(metadata: dict[str, Any]) -> None:
    import pandas as pd

    scalars = {k: v for k, v in metadata.items() if not isinstance(v, (dict, list))}
    if scalars:
        st.dataframe(pd.DataFrame({"field": list(scalars), "value": [dumps(v, indent=None) for v in scalars.values()]}),
                     hide_index=True, width="content")
    rest = {k: v for k, v in metadata.items() if isinstance(v, (dict, list))}
    if rest or not scalars:
        st.json(dumps(truncate(rest)), expanded=1)


def _render_writes(writes: list[dict[str, Any]]) -> None:
    if not writes:
        st.caption("No pending writes on this checkpoint.")
        return
    if any("error" in w and "channel" not in w for w in writes):
        st.warning(f"Pending writes cannot be shown: {md_escape(str(writes[0].get('error')))}")
        return
    st.json(dumps(truncate(writes)), expanded=2)


# ---- the state ------------------------------------------------------------------------------


def render_state(state: Any, normalize: Normalize | None = None) -> None:
    """A (redacted) state: its chat messages as a conversation (``normalize``: the reader's own message
    shape made plain), then the tree, user channels first."""
    path, messages = find_conversation(state, normalize=normalize)
    if messages:
        _render_conversation(messages, path)
        with st.expander(f"Raw messages ({len(messages)})"):
            st.json(dumps(truncate(get_path(state, path))), expanded=1)
        state = without_path(state, path)
    if isinstance(state, dict):
        state = order_channels(state)
    with st.expander("State tree" + (" (messages shown above)" if messages else ""), expanded=True):
        st.json(dumps(truncate(state)), expanded=2)


def _render_conversation(messages: list[dict[str, Any]], path: list[str]) -> None:
    shown = messages[-MAX_MESSAGES:]
    st.markdown(f"**Conversation** · {len(messages)} message(s) in {code('.'.join(map(str, path)))}"
                + (f", last {len(shown)} shown" if len(shown) < len(messages) else ""))
    box = st.container(height=CONVERSATION_HEIGHT, autoscroll=True) if len(shown) > 6 else st.container()
    for m in shown:
        avatar = {"system": ":material/settings:", "tool": ":material/build:"}.get(m["role"])
        with box.chat_message(m["role"], avatar=avatar):
            if isinstance(m["content"], str):
                if m["content"]:
                    st.markdown(literal_lines(m["content"]))  # store text: no links, images, HTML
            else:
                st.json(dumps(truncate(m["content"])), expanded=1)
            for call in m["tool_calls"]:
                st.code(tool_call(call), language=None, wrap_lines=True)
