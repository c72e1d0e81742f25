"""Verification in a background thread, for the dashboard: progress, live findings, cancel.

One job per (index, store) at a time, shared by every browser session of the
process (a second click joins the running job). The job opens its own
short-lived index connections and its own reader, so pages keep reading the
index while it runs; results are recorded in whole chunks (see
:func:`lastgood.integrity.verify.verify_store`), so a cancelled job leaves no
half-written findings. No streamlit here: ``lastgood.ui.integrity`` polls
:func:`job` from a fragment.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lastgood.readers.base import Finding

LIVE_FINDINGS_KEPT = 500


@dataclass
class VerifyJob:
    """A verification running (or finished) in a background thread."""

    index_path: str
    url: str
    depth: str
    only_unverified: bool = False
    done: int = 0
    total: int | None = None
    state: str = "running"  # running | done | cancelled | failed
    error: str | None = None
    errors_found: int = 0
    warnings_found: int = 0
    findings: list[Finding] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    cancel_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total else (1.0 if not self.running else 0.0)

    def cancel(self) -> None:
        self.cancel_event.set()

    def summary(self) -> str:
        what = "full read" if self.depth == "data" else "structure check"
        count = f"{self.done:,}" + (f" of {self.total:,}" if self.total is not None else "")
        # what this check found in the checkpoints it read (the page's totals also hold store-wide ones)
        found = f"in them {self.errors_found} error(s) and {self.warnings_found} warning(s)"
        if self.state == "failed":
            return f"{what} failed after {count} checkpoints: {self.error}"
        if self.running and self.total is None and self.done == 0:
            return f"{what}: checking — counting the checkpoints to read…"  # not "checking 0"
        verb = {"running": "checking", "done": "checked", "cancelled": "cancelled after"}[self.state]
        return f"{what}: {verb} {count} checkpoints; {found}"

    def _progress(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total

    def _found(self, findings: list[Finding]) -> None:
        self.errors_found += sum(1 for f in findings if f.severity == "error")
        self.warnings_found += sum(1 for f in findings if f.severity == "warning")
        room = LIVE_FINDINGS_KEPT - len(self.findings)
        if room > 0:
            self.findings.extend(findings[:room])


_jobs: dict[tuple[str, str], VerifyJob] = {}
_lock = threading.Lock()


def job(index_path: str, url: str) -> VerifyJob | None:
    """The latest job for this store (running or finished), if any."""
    with _lock:
        return _jobs.get((index_path, url))


def start(index_path: str, url: str, depth: str, *, only_unverified: bool = False,
          workers: int | None = None, delay: float = 0.0) -> VerifyJob:
    """Start a verification unless one is running for this store (then return that one).

    ``delay`` seconds pass (cancellable) before the work begins: an automatic check
    lets the page that started it render first."""
    with _lock:
        current = _jobs.get((index_path, url))
        if current is not None and current.running:
            return current
        new = VerifyJob(index_path, url, depth, only_unverified)
        new.thread = threading.Thread(target=_run, args=(new, workers, delay), daemon=True,
                                      name=f"lastgood-verify-{depth}")
        _jobs[(index_path, url)] = new
    new.thread.start()
    return new


INDEX_WAIT_SECONDS = 600.0  # a check waits this long for a command holding the index (then fails: busy)
BACKGROUND_NICE = 10  # pages first: a background check only takes CPU time the server does not need


def _lower_priority() -> None:
    """Lower this thread's scheduling priority (Linux nice values are per thread; worker
    processes forked from it inherit it), so the first screen is not slowed by the check."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: run at normal priority
        pass


def _run(job: VerifyJob, workers: int | None, delay: float = 0.0) -> None:
    from lastgood.index.catalog import Catalog
    from lastgood.stores import open_store
    from lastgood.integrity.verify import verify_store

    _lower_priority()
    if delay > 0:
        job.cancel_event.wait(delay)
    try:
        # the index opened per operation (a CLI command beside the dashboard gets it between them),
        # waiting as long as such a command may hold it
        catalog = Catalog(job.index_path, keep_open=False, lock_wait=INDEX_WAIT_SECONDS, cancel=job.cancel_event)
        store = open_store(catalog, job.url)
        try:
            report = verify_store(catalog, store.store_id, store.reader, read_data=job.depth == "data",
                                  only_unverified=job.only_unverified, workers=workers,
                                  progress=job._progress, on_findings=job._found, cancel=job.cancel_event,
                                  background=True)
            if job.depth == "data" and not report.cancelled:
                _record_step_changes(catalog, store, job)
        finally:
            store.reader.close()
        job.state = "cancelled" if report.cancelled else "done"
    except Exception as exc:  # noqa: BLE001 - any failure is shown on the page, never raised in a thread
        job.error = _one_line(exc)
        job.state = "failed"
    finally:
        job.finished_at = time.time()


STEP_CHANGES_LIMIT = 5_000  # per-step changes decode each parent again: bounded in the background


def _record_step_changes(catalog: Any, store: Any, job: VerifyJob) -> None:
    """After a data check, what each checkpoint changed against its parent (Timeline hover, SQL)."""
    from lastgood.investigate.history import count_without_step_changes, record_step_changes

    pending = count_without_step_changes(catalog, store.store_id)
    if 0 < pending <= STEP_CHANGES_LIMIT and not job.cancel_event.is_set():
        record_step_changes(catalog, store)



def _one_line(exc: Any) -> str:
    from lastgood.redact import redact_text

    return redact_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def cancel_all(timeout: float = 10.0) -> None:
    """Cancel every running job and wait (up to ``timeout`` in all) for their threads, which stop
    their worker processes: the server's shutdown leaves no process behind."""
    with _lock:
        running = [j for j in _jobs.values() if j.running]
    for job in running:
        job.cancel()
    deadline = time.monotonic() + timeout
    for job in running:
        if job.thread is not None:
            job.thread.join(max(0.0, deadline - time.monotonic()))


def wait(index_path: str, url: str, timeout: float = 60.0) -> VerifyJob | None:
    """Block until the store's job finishes (tests, scripts)."""
    current = job(index_path, url)
    if current is not None and current.thread is not None:
        current.thread.join(timeout)
    return current
