"""Worker process pools that are safe to start from any process.

fork() copies only the calling thread: a lock held at that moment by another thread (Airflow's
task runner threads, a loader's prefetch thread, tqdm's monitor, a tokenizer's thread pool) stays
locked forever in the child, which then hangs. The fork server is a clean single-threaded process
that forks the workers instead; it preloads the tokenizer module so each worker starts quickly.
"""

from __future__ import annotations

import multiprocessing


def process_pool(workers: int, initializer=None, initargs: tuple = ()):
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["nanodata.tokenizer"])
    return context.Pool(workers, initializer, initargs)
