"""A LangGraph checkpointer on Lastgood's native store.

    from lastgood.langgraph import LastgoodSaver

    saver = LastgoodSaver("s3://bucket/agents")         # any fsspec URL: a folder, memory://, gs://…
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "t-1"}})     # or: await graph.ainvoke(…)

A thread is a native run (``run_id`` = thread_id, ``namespace`` = checkpoint_ns); a checkpoint keeps
LangGraph's uuid6 id, its parent is ``parent_checkpoint_id``, the catalog entry's metadata is LangGraph's
metadata, and its blob is LangGraph's own serialization of the checkpoint (codec ``langgraph``), so
``lastgood ls/show/diff/verify/restore`` read the store natively. ``put`` follows the native save
protocol (pending marker, blob, commit marker, head pointer); the latest checkpoint of a thread is the
one its head names, so a ``lastgood restore`` (which moves the head) is what the graph resumes from.
Pending writes are files under ``writes/``, one per ``put_writes``. Layout: docs/format.md ("LangGraph
checkpointer"); use and semantics: docs/langgraph-saver.md.

Every method has an async twin (``aget_tuple``, ``alist``, ``aput``, ``aput_writes``, ``adelete_thread``,
``adelete_for_runs``, ``acopy_thread``, ``aprune``) that runs the sync one in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any


from lastgood.readers.native import format as nf
from lastgood.errors import ConflictError

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                           CheckpointMetadata, CheckpointTuple, get_checkpoint_id,
                                           get_serializable_checkpoint_metadata)
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("lastgood.langgraph needs LangGraph's checkpoint package: pip install langgraph "
                      "(or langgraph-checkpoint)") from exc


__all__ = ["LastgoodSaver", "AsyncLastgoodSaver"]

Entry = dict[str, Any]  # a catalog entry: the columns of docs/format.md ("metadata" as JSON text)


from lastgood.readers.native.saver_store import (FSYNC_MODES, Entry, _created_at, _matches, _metadata,  # noqa: F401
                                                 _Store, _thread)

class LastgoodSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpointer writing Lastgood's native store at ``url`` (created when missing).

    ``fsync`` says what a local disk must have done before a call returns (object stores: every file
    is one PUT, durable once it returns, whatever this says). Every file is written whole to a temp
    file and renamed into place, so a killed process never leaves a damaged one; beyond that:

    - ``"data"`` (default, what NativeWriter does): each file's data is synced before it is renamed
      into place. After a power loss no listed checkpoint is damaged; the last saves before it may be
      missing (their renames were not committed yet), like SQLite's ``synchronous=NORMAL``.
    - ``"full"``: the folders are synced after the renames too: a returned ``put``/``put_writes``
      survives a power loss, like SqliteSaver's default (``synchronous=FULL``). About one more disk
      flush per call.
    - ``"none"``: nothing is synced (a killed process is still safe; a power loss may damage the last
      files written).

    ``refuse_stale_writes`` (default True): once a recovery action (``lastgood restore``,
    ``rollback``, ``undo``) has moved a thread's head, a put that continues from anything but the new
    head, by a saver that has not read the thread since, raises ``ConflictError`` instead of
    overwriting the action (see docs/langgraph-saver.md).
    """

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, *,
                 serde: SerializerProtocol | None = None, fsync: str = "data",
                 refuse_stale_writes: bool = True) -> None:
        super().__init__(serde=serde)
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_MODES)}, not {fsync!r}")
        self.url = url
        self.store = _Store(url, storage_options, fsync)
        self.refuse_stale_writes = refuse_stale_writes
        self._known: dict[tuple[str, str], str] = {}  # per (thread, ns): the head this saver last wrote or read
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LastgoodSaver({self.url!r})"

    # ---- reading -------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's latest: the one its head names (a
        ``lastgood restore`` moves it), else the newest id in the catalog."""
        run, ns = _thread(config)
        checkpoint_id = get_checkpoint_id(config)
        head = None
        if checkpoint_id:
            entry = self.store.lookup(run, ns, checkpoint_id)
        else:
            entry, head = self.store.latest(run, ns)
            if entry is not None:
                with self._lock:
                    self._known[(run, ns)] = entry["checkpoint_id"]
        return self._tuple(entry, head) if entry is not None else None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id), of one thread (and namespace, when the config names one) or
        of the whole store; ``filter`` matches top-level metadata keys, ``before`` an id, ``limit`` caps."""
        if config is None:
            entries = self.store.all_entries()
        else:
            run = str(config["configurable"]["thread_id"])
            entries = self.store.thread_entries(run, config["configurable"].get("checkpoint_ns"))
            if wanted := get_checkpoint_id(config):
                entries = [e for e in entries if e["checkpoint_id"] == wanted]
        if before is not None and (bound := get_checkpoint_id(before)):
            entries = [e for e in entries if e["checkpoint_id"] < bound]
        if filter:
            entries = [e for e in entries if _matches(_metadata(e), filter)]
        entries.sort(key=lambda e: e["checkpoint_id"], reverse=True)
        for entry in entries[:limit] if limit is not None else entries:
            yield self._tuple(entry)

    def _tuple(self, entry: Entry, head: Mapping[str, Any] | None = None) -> CheckpointTuple:
        run, ns, checkpoint_id = entry["run_id"], entry.get("namespace") or "", entry["checkpoint_id"]
        checkpoint = self.serde.loads_typed(nf.langgraph_typed(self.store.read_blob(entry)))
        writes = [(w.task_id, w.channel, self.serde.loads_typed((w.type, w.data)))
                  for w in self.store.writes(run, ns, checkpoint_id, head)]
        parent = entry.get("parent_id")
        return CheckpointTuple(
            {"configurable": {"thread_id": run, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint, _metadata(entry),
            {"configurable": {"thread_id": run, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None,
            writes)

    # ---- writing -------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Save ``checkpoint`` as a child of the config's checkpoint and make it the thread's head."""
        thread_id = config["configurable"]["thread_id"]
        run, ns = _thread(config)
        parent = config["configurable"].get("checkpoint_id")
        self._refuse_stale(run, ns, parent)
        type_, data = self.serde.dumps_typed(checkpoint)
        meta = get_serializable_checkpoint_metadata(config, metadata)
        step = meta.get("step")
        source = meta.get("source")
        agent = meta.get("graph_id")
        self.store.save({
            "run_id": run, "namespace": ns, "checkpoint_id": checkpoint["id"], "parent_id": parent,
            "step": step if isinstance(step, int) and not isinstance(step, bool) else 0,
            "created_at": _created_at(checkpoint.get("ts")),
            "trigger": source if isinstance(source, str) else None, "kind": "full",
            "agent": agent if isinstance(agent, str) else None, "codec": nf.LANGGRAPH_CODEC,
            "metadata": json.dumps(meta, ensure_ascii=False, default=str),
        }, nf.encode_langgraph(type_, data))
        with self._lock:
            self._known[(run, ns)] = checkpoint["id"]
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes against the config's checkpoint: one file, written whole. As in
        LangGraph's savers, a write of a (task, idx) already stored is ignored, unless every write of
        the call is special (error, interrupt, scheduled, resume), which replaces."""
        if not writes:
            return
        run, ns = _thread(config)
        rows = [(WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
                for idx, (channel, value) in enumerate(writes)]
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        self.store.save_writes(run, ns, str(config["configurable"]["checkpoint_id"]),
                               nf.encode_langgraph_writes(task_id, task_path, rows, replace))

    def _refuse_stale(self, run: str, ns: str, parent: str | None) -> None:
        """ConflictError when a recovery action moved the head since this saver last wrote or read
        the thread, and this put does not continue from the new head."""
        if not self.refuse_stale_writes:
            return
        with self._lock:
            known = self._known.get((run, ns))
        if known is None:
            return  # this saver never wrote or read the thread: it holds no stale view of it
        head = self.store.read_head(run, ns) or {}
        moved_to = head.get("checkpoint_id")
        note = nf.head_note(head)
        if moved_to in (known, parent) or not note.get("action_id"):
            return
        raise ConflictError(
            f"the head of thread {run!r}{f' (namespace {ns!r})' if ns else ''} was moved by "
            f"{note.get('action', 'an action')} {note.get('action_id')} to {moved_to} (reason: "
            f"{note.get('reason')!r}); this save continues from {parent}, so nothing was saved. Read the "
            "thread again (graph.get_state / invoke) to resume from the restored checkpoint")

    # ---- deleting, copying, pruning --------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Remove every checkpoint, write, blob and head of the thread (all namespaces)."""
        self.store.delete_thread(str(thread_id))
        self._forget(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Remove the checkpoints whose metadata ``run_id`` is one of ``run_ids`` (and their writes);
        a head naming one moves to the newest checkpoint left in its thread."""
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        doomed = [e for e in self.store.all_entries() if _metadata(e).get("run_id") in wanted]
        self.store.delete_entries(doomed, fix_heads=True)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint (same ids, parents, metadata), its writes and the heads to another thread."""
        self.store.copy_thread(str(source_thread_id), str(target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint (its head) and its writes, remove the
        rest; ``delete``: remove the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            by_ns: dict[str, list[Entry]] = {}
            for entry in self.store.thread_entries(str(thread_id), None):
                by_ns.setdefault(entry.get("namespace") or "", []).append(entry)
            doomed = []
            for ns, entries in by_ns.items():
                head = (self.store.read_head(str(thread_id), ns) or {}).get("checkpoint_id")
                ids = {e["checkpoint_id"] for e in entries}
                keep = head if head in ids else max(ids)
                doomed += [e for e in entries if e["checkpoint_id"] != keep]
            self.store.delete_entries(doomed, fix_heads=False)

    def _forget(self, run: str) -> None:
        with self._lock:
            for key in [k for k in self._known if k[0] == run]:
                del self._known[key]

    # ---- maintenance ---------------------------------------------------------------------

    def compact(self) -> Any:
        """Fold the commit markers into one Parquet part (``NativeWriter.compact``; run it from one
        process at a time, not while deleting or pruning)."""
        return self.store.compact()

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Monotonic string versions, as LangGraph's SQLite and Postgres savers write them."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    # ---- async twins (the sync methods in a worker thread) ----------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None
                    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


AsyncLastgoodSaver = LastgoodSaver  # one class serves graph.invoke and graph.ainvoke


# ---- the store ---------------------------------------------------------------------------------
