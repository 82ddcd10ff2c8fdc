"""Shutdown that always finishes (gcs_exit.py): a trainer process iterates the gs:// loader, the emulator process is
SIGKILLed during the first read, mid-iteration, during a resume and before exit, with the loader not closed, closed
and used as a context manager. Every run exits within gcs_exit.HANG_S with status 0 or the loader's one
NanodataError, never `terminate called`. One run per case and phase here; `make faults` runs 32 per case.
Also in process: close(), collection and the context manager stop every thread the loader started."""

import gc
import threading
import time

import gcs_exit
import pytest
from loader_helpers import small_bestfit

from nanodata.loader import lifecycle


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    return gcs_exit.Bucket(tmp_path_factory.mktemp("shutdown"))


@pytest.mark.parametrize("phase", gcs_exit.PHASES)
@pytest.mark.parametrize("case", gcs_exit.CASES)
def test_exit_after_the_endpoint_dies(bucket, case, phase):
    outcome = gcs_exit.run_once(bucket, case, phase, seed=gcs_exit.CASES.index(case) * 10 + gcs_exit.PHASES.index(phase))
    assert not outcome.hung, f"still running {gcs_exit.HANG_S} s after the kill: {outcome.stderr[-2000:]}"
    assert "terminate called" not in outcome.stderr, outcome.stderr[-2000:]
    assert outcome.ok, (outcome.status, outcome.stderr[-2000:])


def loader_threads(other=frozenset()) -> list[str]:
    """The names of the loader threads running now, but for `other` (threads of loaders an earlier test left to
    the garbage collector, which this test does not judge)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("nanodata-loader") and t not in other)


def wait_gone(other=frozenset(), timeout: float = lifecycle.JOIN_TIMEOUT_S + 5) -> list[str]:
    deadline = time.monotonic() + timeout
    while loader_threads(other) and time.monotonic() < deadline:
        time.sleep(0.05)
    return loader_threads(other)


@pytest.mark.parametrize("how", ["close", "with", "collected"])
def test_every_loader_thread_stops(tokenizer, gcs_emulator, gcs_bucket, corpus_dir, how):
    from nanodata import corpus

    uri = f"gs://{gcs_bucket}/corpus"
    corpus.sync(corpus_dir, uri)
    gc.collect()
    other = frozenset(threading.enumerate())
    loader = small_bestfit(tokenizer, uri, tokenizer_threads=2)
    if how == "with":
        with loader:
            next(loader)
            assert loader_threads(other)
    else:
        next(loader)
        assert loader_threads(other)  # read-ahead, decode and prefetch threads are running
        if how == "close":
            loader.close()
        else:
            del loader
            gc.collect()
    assert wait_gone(other) == []
