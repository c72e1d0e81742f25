"""Small reads of many checkpoints at once: a pool of threads, results in the items' order.

On an object store each header, zip directory and trainer state is a ranged GET that mostly waits
on the network; :func:`in_order` keeps ``threads`` of them in flight. Local files in the page cache
are read in step by the caller's own thread (parsing holds the GIL: more threads only contend).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
REMOTE_THREADS = 16  # small reads in flight on an object store
LOCAL_THREADS = 1
AHEAD = 4  # items submitted per thread before the first result is taken


def in_order(function: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """``map(function, items)``, ``threads`` at a time, in the items' order (at most
    ``threads × AHEAD`` submitted ahead); one thread: the caller's own, no pool. An exception
    raised by ``function`` comes out where its item's result would."""
    if threads <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="lastgood-read") as pool:
        pending: list[Future[R]] = []
        try:
            for item in items:
                pending.append(pool.submit(function, item))
                if len(pending) >= threads * AHEAD:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for future in pending:  # a consumer that stopped early, or an error: nothing more starts
                future.cancel()
