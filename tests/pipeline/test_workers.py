"""Worker pools started from a process with other threads must not inherit their held locks."""

import subprocess
import sys
import threading

import pytest

from nanodata.pipeline.pretokenize import pretokenize
from nanodata.pipeline.workers import process_pool

HELD = threading.Lock()  # stands for any lock another thread holds (logging, an event loop, tqdm's monitor)


def _takes_the_lock(x: int) -> int:
    with HELD:  # a forked child would wait forever: the thread that holds the lock was not copied
        return x * x


@pytest.fixture
def thread_holding_a_lock():
    release = threading.Event()

    def hold():
        with HELD:
            release.wait()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    yield
    release.set()
    thread.join()


def test_single_threaded_process_forks():
    # in a fresh interpreter: this pytest process may have threads of earlier tests alive
    code = "from nanodata.pipeline.workers import process_pool\nwith process_pool(1) as p: print(p._ctx.get_start_method())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "fork\n"


def test_workers_start_clean_while_another_thread_holds_a_lock(thread_holding_a_lock):
    with process_pool(2) as pool:
        assert pool._ctx.get_start_method() == "forkserver"
        assert pool.map_async(_takes_the_lock, range(6)).get(timeout=60) == [0, 1, 4, 9, 16, 25]


def _variable(name: str) -> str | None:
    import os

    return os.environ.get(name)


def test_workers_see_the_environment_as_it_is_when_the_pool_starts(thread_holding_a_lock, monkeypatch):
    """The fork server keeps the environment it started with: a variable set since (the tests' emulator address, a
    deployment's STORAGE_EMULATOR_HOST) must still reach the workers, as it would a forked worker."""
    monkeypatch.setenv("NANODATA_TEST_WORKER_ENV", "when the fork server started")
    with process_pool(1) as pool:  # starts the fork server (a thread holds a lock) with this environment
        assert pool._ctx.get_start_method() == "forkserver"
        assert pool.apply(_variable, ("NANODATA_TEST_WORKER_ENV",)) == "when the fork server started"
    monkeypatch.setenv("NANODATA_TEST_WORKER_ENV", "now")
    with process_pool(2) as pool:
        assert pool.map(_variable, ["NANODATA_TEST_WORKER_ENV"] * 4) == ["now"] * 4
    monkeypatch.delenv("NANODATA_TEST_WORKER_ENV")
    with process_pool(1) as pool:
        assert pool.apply(_variable, ("NANODATA_TEST_WORKER_ENV",)) is None


def test_pretokenize_from_a_threaded_process_matches_one_worker(thread_holding_a_lock, corpus_dir, tmp_path):
    outs = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        pretokenize(corpus_dir, "cl100k_base", out, shard_tokens=9_999, workers=workers, progress=False)
        outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outs[0] == outs[1]
