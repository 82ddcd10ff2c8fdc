"""The threads a loader starts, and the one way they all stop: on close(), on garbage collection, at exit.

Why exit needs care: a daemon thread still running when the interpreter finalizes is frozen the moment it
next needs the interpreter. If that thread is inside pyarrow (decoding a row group through a Python file
object) or another C++ library calling back into Python, the freeze unwinds C++ frames that cannot be
unwound (`terminate called without an active exception`), or leaves a C++ thread pool waiting forever on it
(the process hangs at exit). So every loader thread is registered here under its loader's stop event, and
`shutdown(stop)` sets the event and joins each thread with a bounded wait. The threads check the event
between steps and their file handles refuse reads once it is set, so a join ends in milliseconds, not after
a network timeout. A `Loader` calls it on close() and from a weakref finalizer, which runs when the loader is
collected and, for loaders never closed, at interpreter exit (before daemon threads are frozen).
"""

from __future__ import annotations

import threading
import time
import weakref

JOIN_TIMEOUT_S = 5.0  # all of one loader's threads together; each checks the stop event every 0.1-0.5 s

_threads: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # stop event -> [threads]
_closers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # stop event -> [callables]
# re-entrant: a collection may run a loader's finalizer (shutdown) inside the very `with _lock` of another
# loader's start_thread on this thread (gc runs at any allocation); a plain Lock deadlocked there (seen in make test)
_lock = threading.RLock()


def start_thread(stop: threading.Event, target, name: str, args: tuple = ()) -> threading.Thread:
    """A daemon thread of the loader whose stop event is `stop`, joined by shutdown(stop)."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    with _lock:
        threads = _threads.setdefault(stop, [])
        threads[:] = [t for t in threads if t.is_alive()]
        threads.append(thread)
    thread.start()
    return thread


def on_shutdown(stop: threading.Event, close) -> None:
    """close() runs once at shutdown(stop), before the joins (a thread pool to stop, say)."""
    with _lock:
        _closers.setdefault(stop, []).append(close)


def shutdown(stop: threading.Event, timeout: float = JOIN_TIMEOUT_S) -> list[str]:
    """Set `stop`, run its closers, join its threads within `timeout` in all; the names of any still running."""
    stop.set()
    with _lock:
        closers = _closers.pop(stop, [])
        threads = list(_threads.get(stop, []))
    for close in closers:
        close()
    deadline = time.monotonic() + timeout
    me = threading.current_thread()  # a finalizer may run on one of the loader's own threads (gc is anywhere)
    for thread in threads:
        if thread is not me:
            thread.join(max(0.0, deadline - time.monotonic()))
    return [thread.name for thread in threads if thread.is_alive() and thread is not me]


class Loader:
    """What the loader functions return: an iterator of batches (a generator's next/send/close) that stops every
    thread it started on close(), when leaving a `with` block, when collected, and at interpreter exit."""

    def __init__(self, batches, stop: threading.Event):
        self._batches, self.stop = batches, stop
        # holds the event, not the loader, so that collecting the loader runs it
        self._finalizer = weakref.finalize(self, shutdown, stop)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)

    def send(self, value):
        return self._batches.send(value)

    def close(self) -> None:
        try:
            self._batches.close()
        finally:
            self._finalizer()  # once: shutdown(stop)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
