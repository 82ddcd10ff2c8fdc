"""Worker process pools that are safe to start from any process.

fork() is the fast start: workers inherit the parent's loaded tokenizer and data for free. But
it copies only the calling thread: a lock held at that moment by another thread (Airflow's task
runner threads, a loader's prefetch thread) stays locked forever in the child, which then hangs.
So fork only when no such thread exists; otherwise workers come from a fork server, a clean
single-threaded process that preloads the tokenizer module (the caller's main module must then be
import-safe, as with any spawned worker). tqdm's monitor thread does not count: it only ever
takes tqdm's own lock, which workers never touch.
"""

from __future__ import annotations

import multiprocessing
import os
import threading

from tqdm import tqdm


def _threads_that_could_hold_locks() -> list[threading.Thread]:
    me = threading.current_thread()
    return [t for t in threading.enumerate() if t is not me and t is not tqdm.monitor]


def process_context():
    """The multiprocessing context for worker processes started now: fork, or the fork server (see above)."""
    if not _threads_that_could_hold_locks():
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["nanodata.tokenizer"])
    return context


def process_pool(workers: int, initializer=None, initargs: tuple = ()):
    return process_context().Pool(workers, *in_this_environment(initializer, initargs))


def in_this_environment(initializer=None, initargs: tuple = ()) -> tuple:
    """A pool's (initializer, initargs) that first give the worker the environment as it is now: a fork server
    keeps the one it started with (a variable set since, such as STORAGE_EMULATOR_HOST, would not reach the
    workers), while a forked worker would have seen it."""
    return _with_environment, (dict(os.environ), initializer, initargs)


def _with_environment(environ: dict, initializer, initargs: tuple) -> None:
    os.environ.clear()
    os.environ.update(environ)
    if initializer is not None:
        initializer(*initargs)
