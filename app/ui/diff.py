"""Streamlit glue for the Diff page: which two checkpoints it compares (A and B, each from any of the
dashboard's stores), the cached diff, the conversation, the other changes, both states as one tree,
the tensors of two training checkpoints, export. The views along a run (a field over time,
divergence, each step's changes): lastgood.ui.history.

The selection: its session keys and the page's link (lastgood.ui.links: ``store``, ``a``, ``b``,
``store_b``), so a shared link opens the same diff. B defaults to the newest checkpoint with a state
of the most recent run; A follows B (its parent) until A is picked by hand, named by a link or chosen
with B (:func:`select_pair`); a checkpoint chosen by code selects its run too. An id a link names that
matches no checkpoint (or several) is refused: nothing is compared until that side is picked.

Everything shown is redacted: diffs by ``diff_states`` (redact=True), states by
``lastgood.investigate.show.load_state_safely``, tensor names by the tensor diff's table (redact_frame).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from lastgood.cli.output import dumps
from lastgood.display import changes as shown_changes
from lastgood.display.figures import DAMAGED, utc
from lastgood.display.numbers import short_id
from lastgood.errors import LastgoodError
from lastgood.index.queries import checkpoint_handle
from lastgood.investigate import history as inv
from lastgood.investigate.show import load_state_safely
from lastgood.investigate.stateview import find_conversation, get_path, message_normalizer
from lastgood.readers.base import Capability, capabilities
from lastgood.readers.registry import display_url
from lastgood.redact import redact_text
from lastgood.ui import links, report_button, stores
from lastgood.ui.escape import code, literal_lines, md_escape
from lastgood.ui.pagerun import guarded, stop
from lastgood.ui.recovery import recovery_links
from lastgood.ui.stores import STORE_KEY, StoreRef, runs_frame
from lastgood.ui.tables import export_buttons, redact_frame

MAX_CHOICES = 500
MAX_MESSAGE_CHANGES = 500  # changed messages drawn one by one (the export has every change)
MESSAGE_KINDS = {"add": "added", "remove": "removed", "edit": "edited", "move": "moved"}  # a message change, as shown
CONTEXT_SHOWN = 20  # unchanged messages listed inside one collapsed group
MAX_TREE_ROWS = 2000
AUTO_TENSOR_BYTES = 512 * 2**20  # two training checkpoints this small are compared tensor by tensor at once
# session-state keys
RUN_A, CKPT_A, RUN_B, CKPT_B = "diff_run_a", "diff_ckpt_a", "diff_run_b", "diff_ckpt_b"
PREV_B = "diff_prev_b"  # B when A last followed it
PIN_A, STORE_A, STORE_B = "diff_pin_a", "diff_store_a", "diff_store_b"  # A chosen (not B's parent); the stores
REFUSED = "diff_refused"  # {side: why}: a link named an id that matches no checkpoint (or several)
TENSORS = "diff_tensors"  # the Compare tensors button
SAME_STORE = ""  # STORE_B's value when B is in A's store
REMEMBERED = (RUN_A, CKPT_A, RUN_B, CKPT_B, STORE_B)  # kept when the operator visits another page
ONLY_CHANGES = "diff_only"  # the Only changes toggle
SYNC = "_sync_run"  # suffix: a checkpoint chosen by code (link, parent) selects its run too
KEYS = {"A": (RUN_A, CKPT_A), "B": (RUN_B, CKPT_B)}


@dataclass(frozen=True)
class DiffView:
    """One computed diff with what the page shows around it (all redacted)."""

    result: dict[str, Any]
    state_a: Any
    state_b: Any
    error_a: str | None
    error_b: str | None
    messages_path: list[str]
    statuses: tuple[str | None, str | None] = (None, None)
    conversation: list[Any] | None = None  # display.changes' messages and unchanged groups, in order
    messages_b: int = 0  # how many messages B's conversation holds
    training: bool = False  # both stores list tensors (a tensor diff can be shown)
    size_bytes: int = 0  # A's and B's sizes together


# ---- the link -------------------------------------------------------------------------------


def take_link() -> None:
    """On the run a link arrives in, its store, A, B (and store_b) become the selection."""
    params = links.take("diff", [links.STORE, links.A, links.B, links.STORE_B])
    if not params:
        return
    st.session_state.pop(REFUSED, None)
    if params.get(links.STORE):
        st.session_state[STORE_KEY] = params[links.STORE]
    st.session_state[STORE_B] = params.get(links.STORE_B) or SAME_STORE
    if params.get(links.B):
        _queue(CKPT_B, params[links.B])
    if params.get(links.A):
        _queue(CKPT_A, params[links.A])
        st.session_state[PIN_A] = True  # "compare with…": A stays while B is picked


def _queue(ckpt_key: str, checkpoint: str) -> None:
    """Select ``checkpoint`` (its run is selected with it when the side is drawn)."""
    st.session_state[ckpt_key] = checkpoint
    st.session_state[ckpt_key + SYNC] = True


def write_link(ref: StoreRef, a: str | None, b: str | None, ref_b: StoreRef | None = None) -> None:
    """The selection in the URL, so a copied link opens this same diff (``store_b`` only when B
    is in another store; a secret-shaped checkpoint by its handle)."""
    ref_b = ref_b or ref
    links.write("diff", {links.STORE: ref.url, links.A: _link_value(ref, a), links.B: _link_value(ref_b, b),
                         links.STORE_B: ref_b.url if ref_b.url != ref.url else None})


def _link_value(ref: StoreRef, checkpoint: str | None) -> str | None:
    if not checkpoint or not links.is_secret_shaped(checkpoint):
        return checkpoint
    record = _maybe_record(ref, checkpoint)
    return checkpoint_handle(record["run_id"], record["namespace"], checkpoint) if record else None


# ---- stores ---------------------------------------------------------------------------------


def pick_stores(ref: StoreRef, row_a: Any, row_b: Any) -> StoreRef:
    """Store (A) — the dashboard's store, the sidebar's choice — and Store (B): A's (default) or another
    one of the dashboard's stores (a native run against a LangGraph thread, say). Returns B's store."""
    urls = stores.candidate_urls(stores.catalog(ref.index_path))
    st.session_state[STORE_A] = ref.url
    row_a.selectbox("Store (A)", urls if ref.url in urls else [ref.url, *urls], key=STORE_A, format_func=display_url,
                    on_change=_store_a_changed, help="The dashboard's store (the sidebar's choice follows)")
    options = [SAME_STORE, *[u for u in urls if u != ref.url]]
    if st.session_state.get(STORE_B) not in options:
        st.session_state[STORE_B] = SAME_STORE
    url = row_b.selectbox("Store (B)", options, key=STORE_B, format_func=lambda u: display_url(u) if u else
                          f"same as A ({display_url(ref.url)})", help="Compare with a checkpoint of another store")
    if url == SAME_STORE:
        return ref
    ref_b = stores.ensure_indexed(stores.catalog(ref.index_path), ref.index_path, url, ref.allow_write)
    if ref_b is None:
        st.error(f"Store {code(display_url(url))} cannot be opened: pick another store for B.")
        stop()
    return ref_b


def _store_a_changed() -> None:
    links.not_a_link()
    st.session_state[STORE_KEY] = st.session_state[STORE_A]


def runs_of(ref: StoreRef) -> list[str]:
    """The store's runs, most recent first (as the Timeline lists them): the default is the latest."""
    runs = runs_frame(ref)
    return [] if runs.empty else list(dict.fromkeys(runs["run_id"]))


# ---- checkpoints ----------------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=64, show_spinner=False)
def _run_choices(index_path: str, store_id: int, run_id: str) -> dict[str, tuple[str, str]]:
    """The run's newest checkpoints, newest first: id -> (label, status)."""
    records = inv.run_checkpoints(stores.catalog(index_path), store_id, run_id)[-MAX_CHOICES:]
    return {r.checkpoint_id: (f"step {r.step} · {utc(r.created_at)} · {r.status} · {short_id(r.checkpoint_id)}",
                              r.status) for r in reversed(records)}


def _newest_with_state(choices: dict[str, tuple[str, str]]) -> str | None:
    """The default of a side: the newest checkpoint with a state to compare (not incomplete or
    corrupt, whose state cannot be shown), else the newest."""
    usable = (cid for cid, (_, status) in choices.items() if status not in DAMAGED)
    return next(usable, next(iter(choices), None))


@st.cache_data(ttl=60, max_entries=64, show_spinner=False)
def _record(index_path: str, store_id: int, ref: str) -> dict[str, Any]:
    record = inv.resolve_ref(stores.catalog(index_path), store_id, ref)
    parent = inv.parent_of(stores.catalog(index_path), store_id, record)
    return {"checkpoint_id": record.checkpoint_id, "run_id": record.run_id, "namespace": record.namespace,
            "step": record.step, "created_at": record.created_at, "status": record.status,
            "size_bytes": record.size_bytes or 0, "parent_id": parent.checkpoint_id if parent else None}


def pick_checkpoints(ref: StoreRef, runs: list[str], ref_b: StoreRef, runs_b: list[str], row_a: list[Any],
                     row_b: list[Any]) -> tuple[str | None, str | None]:
    """Run and checkpoint for A (in ``row_a``'s two cells, drawn above) and B (``row_b``'s). B defaults to the
    newest checkpoint with a state of the most recent run; A to B's parent (when B is in A's store),
    re-chosen whenever B changes until A is picked by hand or named by a link."""
    with guarded():
        b = _pick_side(ref_b, runs_b, "B", row_b)
        if b and st.session_state.get(PREV_B) != (ref_b.url, b):
            st.session_state[PREV_B] = (ref_b.url, b)
            parent = _record(ref_b.index_path, ref_b.store_id, b)["parent_id"] if ref_b == ref else None
            if not st.session_state.get(PIN_A) and ref_b == ref and "A" not in refused():
                _queue(CKPT_A, parent or b)
        a = _pick_side(ref, runs, "A", row_a)
    return a, b


def refused() -> dict[str, str]:
    """The sides a link named an id for that matches no checkpoint, with why."""
    return st.session_state.get(REFUSED) or {}


def _maybe_record(ref: StoreRef, checkpoint: str) -> dict[str, Any] | None:
    try:
        return _record(ref.index_path, ref.store_id, checkpoint)
    except LastgoodError:  # e.g. a checkpoint of the store picked before
        return None


def _pick_side(ref: StoreRef, runs: list[str], side: str, row: list[Any]) -> str | None:
    run_key, ckpt_key = KEYS[side]
    wanted = st.session_state.get(ckpt_key)
    if wanted and st.session_state.pop(ckpt_key + SYNC, False):
        try:
            record = _record(ref.index_path, ref.store_id, wanted)
        except LastgoodError as exc:  # a bad link: refused, and the pickers to choose another
            st.session_state[REFUSED] = {**refused(), side: redact_text(str(exc))}
            st.session_state[ckpt_key] = wanted = None
        else:
            st.session_state[run_key] = record["run_id"]
            st.session_state[ckpt_key] = wanted = record["checkpoint_id"]
    if st.session_state.get(run_key) not in runs:
        st.session_state[run_key] = runs[0]
    run = row[0].selectbox(f"Run ({side})", runs, key=run_key, on_change=_picked, args=(side,))
    listed = _run_choices(ref.index_path, ref.store_id, run)
    choices = {cid: label for cid, (label, _) in listed.items()}
    record = _maybe_record(ref, wanted) if wanted and wanted not in choices else None
    if record and record["run_id"] == run:  # older than the newest MAX_CHOICES
        choices[wanted] = f"step {record['step']} · {short_id(wanted)}"
    if side in refused():
        st.session_state[ckpt_key] = None  # nothing chosen until the operator picks
    elif st.session_state.get(ckpt_key) not in choices:
        st.session_state[ckpt_key] = _newest_with_state(listed)
    return row[1].selectbox(side, list(choices), format_func=choices.get, key=ckpt_key, on_change=_picked,
                         args=(side,), placeholder=f"Pick {side}")


def _picked(side: str) -> None:
    """A side picked by hand: a link's refused id no longer stands; A stays as chosen; the rerun's
    address is no link (links.not_a_link)."""
    links.not_a_link()
    st.session_state[REFUSED] = {s: why for s, why in refused().items() if s != side}
    if side == "A":
        st.session_state[PIN_A] = True


def render_refused(ref: StoreRef, ref_b: StoreRef) -> bool:
    """Say which id of the link matches nothing (nothing is compared); True when one does."""
    why = refused()
    for side, message in why.items():
        where = (ref if side == "A" else ref_b).display
        st.error(f"{side}: {md_escape(message)} in store {code(where)} — nothing is compared until {side} is "
                 "picked above.", icon=":material/link_off:")
    return bool(why)


def select_pair(a: str, b: str) -> None:
    """Compare ``a`` with ``b`` (a callback: before the run it triggers), A kept as chosen."""
    _queue(CKPT_B, b)
    _queue(CKPT_A, a)
    st.session_state[PIN_A] = True  # keep this A (not B's parent)
    st.session_state.pop(REFUSED, None)


# ---- the diff ---------------------------------------------------------------------------


@st.cache_data(ttl=60, max_entries=16, show_spinner="Decoding and comparing…")
def _diff_view(index_path: str, url: str, store_id: int, a: str, b: str, url_b: str, store_id_b: int) -> DiffView:
    index = stores.catalog(index_path)
    store, store_b = stores.cached_store(index_path, url), stores.cached_store(index_path, url_b)
    result, label_a, label_b = inv.diff_checkpoints(index, store, a, b, store_b)
    record_a = inv.resolve_ref(index, store_id, a)
    record_b = inv.resolve_ref(index, store_id_b, b)
    state_a, error_a = load_state_safely(store, record_a)
    state_b, error_b = load_state_safely(store_b, record_b)
    normalize = message_normalizer(store_b.reader)  # the readers' own message shapes made plain
    path, _ = find_conversation(state_b, normalize=normalize)
    if not path:
        normalize = message_normalizer(store.reader)
        path, _ = find_conversation(state_a, normalize=normalize)
    data = result.to_dict(label_a, label_b)
    messages_a, messages_b = _list_at(state_a, path), _list_at(state_b, path)
    items = shown_changes.conversation_diff(messages_a or [], messages_b or [], data["changes"],
                                            "/" + "/".join(path), normalize) if path else None
    training = all(Capability.TENSORS in capabilities(s.reader) for s in (store, store_b))
    return DiffView(data, state_a, state_b, error_a, error_b, path, (record_a.status, record_b.status), items,
                    len(messages_b or []), training, (record_a.size_bytes or 0) + (record_b.size_bytes or 0))


def _list_at(state: Any, path: list[str]) -> list[Any] | None:
    try:
        found = get_path(state, path) if path else None
    except (KeyError, IndexError, TypeError):
        return None
    return found if isinstance(found, list) else None


def diff_view(ref: StoreRef, a: str, b: str, ref_b: StoreRef | None = None) -> DiffView:
    ref_b = ref_b or ref
    with guarded():
        return _diff_view(ref.index_path, ref.url, ref.store_id, a, b, ref_b.url, ref_b.store_id)


def render_summary(view: DiffView) -> None:
    s = view.result["summary"]
    cols = st.columns(4)
    for col, (label, key, op) in zip(cols, [("Added", "added", "add"), ("Removed", "removed", "remove"),
                                            ("Changed", "changed", "change"), ("Moved", "moved", "move")]):
        meaning = shown_changes.CHANGE_KINDS[op][1]
        if op == "change":
            meaning += "; a *type change* (another kind of value) counts here too"
        col.metric(label, f"{s.get(key, 0):,}", help=meaning)
    st.caption(" · ".join(f"**{label}**: {meaning.split(':')[0].split(' (')[0]}"
                          for label, meaning in shown_changes.CHANGE_KINDS.values()),
               help=shown_changes.kinds_legend())
    if not view.result["changes"]:
        st.success("No changes: A and B hold the same state.")


def render_recovery_links(ref: StoreRef, view: DiffView, ref_b: StoreRef | None = None) -> None:
    """Restore / rollback / quarantine A or B: links to the Recovery page's dry-run preview
    (B only when it is in A's store: the Recovery page acts on the selected store)."""
    report_button.render(ref, pair=report_button.diff_pair(view, ref, ref_b))  # "Download report": with this diff
    sides = ("a", "b") if ref_b is None or ref_b.url == ref.url else ("a",)
    with st.expander("Act on A or B (restore, rollback, quarantine)"):
        for side, status in zip(sides, view.statuses):
            checkpoint = {**view.result[side], "status": status}
            st.markdown(f"**{side.upper()}** {code(short_id(checkpoint['checkpoint_id']))} · step "
                        f"{checkpoint.get('step')} · {status} · run {code(redact_text(str(checkpoint['run_id'])))}")
            recovery_links(ref, checkpoint)


# ---- the conversation -------------------------------------------------------------------------


def render_conversation_changes(view: DiffView) -> None:
    """Every changed message, in order, the unchanged ones between them collapsed."""
    if not view.messages_path:
        return
    prefix = "/" + "/".join(view.messages_path)
    items = view.conversation or []
    changed = [i for i in items if isinstance(i, shown_changes.Message)]
    st.markdown(f"**Conversation** · {code('/'.join(view.messages_path))} · {view.messages_b:,} "
                f"message(s) in B{message_counts(changed)}")
    whole = next((c for c in view.result["changes"]  # the list, or a dict above it, is on one side only
                  if c["path"] == prefix or prefix.startswith(c["path"] + "/")), None)
    if whole is not None and not changed:  # the list itself appeared, went or changed type
        what = {"add": "only B has it", "remove": "only A has it"}.get(whole["op"], "it changed as a whole")
        st.caption(f"The conversation is not in both states ({what}): see {code(whole['path'] or '/')} under "
                   "Other changes.")
        return
    if not changed:
        st.caption("No message was added, removed, edited or moved.")
        return
    drawn = 0
    for item in items:
        if isinstance(item, shown_changes.Unchanged):
            _render_unchanged(item)
        elif drawn < MAX_MESSAGE_CHANGES:
            _render_message(item)
            drawn += 1
    if len(changed) > drawn:
        st.caption(f"{len(changed) - drawn:,} more changed messages: export the JSON for all.")


def message_counts(changed: list[shown_changes.Message]) -> str:
    """``": 2 added, 1 edited"`` (in the order added, removed, edited, moved), or ``""`` for none."""
    kinds = [m.kind for m in changed]
    parts = [f"{kinds.count(kind):,} {label}" for kind, label in MESSAGE_KINDS.items() if kind in kinds]
    return ": " + ", ".join(parts) if parts else ""


def _render_message(m: shown_changes.Message) -> None:
    label = MESSAGE_KINDS[m.kind]
    where = f"#{m.index} in A" if m.kind == "remove" else f"#{m.index}"
    if m.kind == "move" and m.moved_from:
        where = f"#{m.moved_from.rsplit('/', 1)[-1]} in A → #{m.index} in B (same message, another position)"
    role = m.role if m.role in ("user", "assistant", "human", "ai") else "assistant"
    avatar = {"system": ":material/settings:", "tool": ":material/build:"}.get(m.role)
    with st.chat_message(role, avatar=avatar):
        st.badge(f"{label} · {where}", color=shown_changes.KIND_COLORS[m.kind])
        if m.text:
            st.markdown(literal_lines(m.text))  # store text: no links, images, HTML
        for call in m.tool_calls[:5]:
            st.code(redact_text(dumps(call, indent=None)), language=None, wrap_lines=True)
        if m.fields:
            st.caption("changed: " + ", ".join(code(f) for f in m.fields[:10]))
        if m.was is not None:
            st.caption(f"was: {md_escape(m.was)}")


def _render_unchanged(group: shown_changes.Unchanged) -> None:
    count = group.last - group.first + 1
    with st.expander(f"{count:,} unchanged message{'s' if count != 1 else ''} (#{group.first}–#{group.last})"
                     if count > 1 else f"1 unchanged message (#{group.first})", icon=":material/unfold_more:"):
        shown = group.messages if len(group.messages) <= CONTEXT_SHOWN else \
            group.messages[:CONTEXT_SHOWN // 2] + group.messages[-CONTEXT_SHOWN // 2:]
        for i, m in enumerate(shown):
            if len(group.messages) > CONTEXT_SHOWN and i == CONTEXT_SHOWN // 2:
                st.caption(f"… {len(group.messages) - CONTEXT_SHOWN:,} more …")
            st.markdown(f"`#{m.index}` **{md_escape(m.role)}** · {md_escape(m.text[:200])}")


# ---- the other changes and the whole tree ------------------------------------------------------


def render_change_tree(view: DiffView) -> None:
    """The other changes, one collapsible group per top-level key: the kind in words, the path, A's
    and B's values, the difference of numbers."""
    groups = shown_changes.other_change_groups(view.result["changes"], view.messages_path)  # messages: above
    if not groups:
        return
    st.markdown("**Other changes**", help=shown_changes.kinds_legend())
    for top, group in sorted(groups.items()):
        with st.expander(f"{code(top)} · {len(group)} change(s)", expanded=len(groups) <= 3):
            rows = pd.DataFrame(shown_changes.change_rows(group[:MAX_TREE_ROWS]))
            # an empty column says nothing: the difference of numbers, a move's origin
            rows = rows[[c for c in rows.columns if c in ("change", "path", "A", "B") or rows[c].astype(bool).any()]]
            st.dataframe(rows, hide_index=True, width="stretch",
                         column_config={"path": st.column_config.TextColumn("path", width="medium")})
            export_buttons(rows, f"diff-changes-{top}")


def render_tree(view: DiffView) -> None:
    """Both states as one readable tree (Only changes off): every key and item, A's and B's values
    side by side, what changed — the conversation folded (it is shown message by message above)."""
    for side, error in (("A", view.error_a), ("B", view.error_b)):
        if error:
            st.warning(f"{side}'s state cannot be shown: {md_escape(error)}")
    folded = ("/" + "/".join(view.messages_path),) if view.messages_path else ()
    rows, more = shown_changes.tree_rows(view.state_a, view.state_b, view.result["changes"], MAX_TREE_ROWS, folded)
    st.markdown(f"**Both states** · A {code(short_id(view.result['a']['checkpoint_id']))} and B "
                f"{code(short_id(view.result['b']['checkpoint_id']))}, key by key (— : not there)")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=min(len(rows), 25) * 35 + 38,
                 column_config={"field": st.column_config.TextColumn("field", width="medium"),
                                "change": st.column_config.TextColumn("change", width="small"),
                                "path": st.column_config.TextColumn("path", width="small")})
    export_buttons(pd.DataFrame(rows), "diff-both-states")
    if more:
        st.caption(f"The first {MAX_TREE_ROWS:,} rows: export the JSON for every change.")


# ---- training checkpoints -----------------------------------------------------------------------


@st.cache_data(ttl=300, max_entries=8, show_spinner="Reading both checkpoints' tensors…")
def _tensor_diff(index_path: str, url: str, store_id: int, a: str, b: str, url_b: str, store_id_b: int) -> dict[str, Any]:
    from lastgood.investigate.tensordiff import tensor_diff

    index = stores.catalog(index_path)
    store, store_b = stores.cached_store(index_path, url), stores.cached_store(index_path, url_b)
    return tensor_diff(store, inv.resolve_ref(index, store_id, a), store_b, inv.resolve_ref(index, store_id_b, b))


def render_tensor_diff(ref: StoreRef, view: DiffView, ref_b: StoreRef | None = None) -> None:
    """Two training checkpoints: every tensor's change (‖ΔW‖/‖W‖, cosine, max |Δ|, NaN appearing), the
    most changed first, and the largest change per layer as bars (a layer where NaN appeared in red)."""
    from lastgood.display import tensors as shown_tensors

    if not view.training:
        return
    ref_b = ref_b or ref
    st.subheader("Tensors")
    big = view.size_bytes > AUTO_TENSOR_BYTES
    if big and not st.button(f"Compare the tensors (reads {view.size_bytes / 2**30:.1f} GB)", key=TENSORS,
                             icon=":material/compare_arrows:"):
        return
    with guarded():
        result = _tensor_diff(ref.index_path, ref.url, ref.store_id, view.result["a"]["checkpoint_id"],
                              view.result["b"]["checkpoint_id"], ref_b.url, ref_b.store_id)
    st.caption(shown_tensors.tensor_diff_summary(result))
    nan = result["summary"].get("nan_appeared")
    if nan:
        st.error(f"NaN appeared in {nan} tensor(s) of B that had none in A.", icon=":material/warning:")
    rows = redact_frame(pd.DataFrame(shown_tensors.tensor_diff_rows(result)))
    rows = rows[[c for c in rows.columns if c != "error" or rows[c].astype(bool).any()]]  # no empty column
    styled = rows.style.apply(lambda r: ["background-color: #fde2e1" if r["change"] == "NaN appeared" else ""
                                         for _ in r], axis=1)
    st.dataframe(styled, hide_index=True, width="stretch",
                 column_config={"relative change": st.column_config.NumberColumn(format="%.4g", help="‖B − A‖ / ‖A‖"),
                                "cosine": st.column_config.NumberColumn(format="%.4f"),
                                "max |Δ|": st.column_config.NumberColumn(format="%.4g")})
    export_buttons(rows, "tensor-diff")
    if result["layers"]:
        st.plotly_chart(shown_tensors.layer_figure(result["layers"]), width="stretch", key="diff_layers")


def export_button(view: DiffView) -> None:
    a, b = view.result["a"]["checkpoint_id"], view.result["b"]["checkpoint_id"]
    st.download_button("Export JSON", dumps(view.result),
                       file_name=f"diff-{a[:13]}-{b[:13]}.json", mime="application/json", icon=":material/download:")
