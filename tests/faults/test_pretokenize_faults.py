"""`nanodata pretokenize` killed with -9 at seeded random moments, and run out of disk.

After each fault a loader either refuses the output directory with one line, or sees exactly the files
of one clean run (the set committed before, or the finished new one): never shards of two runs, never a
partial set. A re-run to completion gives the bytes of a clean run.
"""

import os
import re
import shlex
import signal
import subprocess
import sys

import pytest
from corpus import write_corpus
from faults import kill_at, kill_moments, nanodata_cmd, run_on_small_disk, same_tree, timed_run

from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite

SEED = 1003
KILLS = 6
SIZES = (3_000, 7_000)  # two --shard-tokens: each kill interrupts a run over the other size's committed set


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~0.9M cl100k tokens: about 300 shards of 3000, so the writing phase is most of a run."""
    data = tmp_path_factory.mktemp("corpus")
    write_corpus(data, n_files=4, docs_per_file=2000)
    return data


def pretokenize_cmd(corpus, out, shard_tokens: int) -> list[str]:
    return nanodata_cmd("pretokenize", "--input", corpus, "--tokenizer", "cl100k_base", "--out", out,
                        "--shard-tokens", shard_tokens, "--workers", 2)


def refused_or_clean(out, clean: dict) -> str:
    """'refused' if DataLoaderLite refuses `out` (one line, says to re-run), else the clean run `out` equals."""
    try:
        DataLoaderLite(1, 16, 0, 1, "train", out)
    except NanodataError as exc:
        assert "\n" not in str(exc) and "re-run 'nanodata pretokenize'" in str(exc)
        return "refused"
    same = [size for size, clean_out in clean.items() if same_tree(out, clean_out) == []]
    assert same, f"the loader accepted a directory no clean run left: {sorted(p.name for p in out.iterdir())}"
    return f"clean {same[0]}"


def test_kill_9_then_rerun_gives_the_clean_bytes(corpus, tmp_path):
    clean = {size: tmp_path / f"clean_{size}" for size in SIZES}
    seconds = max(timed_run(pretokenize_cmd(corpus, clean[size], size)) for size in SIZES)
    out = tmp_path / "out"
    timed_run(pretokenize_cmd(corpus, out, SIZES[-1]))
    seen = []
    for i, moment in enumerate(kill_moments(SEED, seconds, KILLS)):
        size = SIZES[i % 2]
        assert kill_at(pretokenize_cmd(corpus, out, size), moment) in (None, 0)
        seen.append(refused_or_clean(out, clean))
        timed_run(pretokenize_cmd(corpus, out, size))
        assert same_tree(out, clean[size]) == [], f"re-run after a kill at {moment:.2f}s"
    assert "refused" in seen, f"no kill landed while shards were being written: {seen}"


def test_full_disk_names_the_file_and_leaves_nothing_loadable(corpus, tmp_path, corpus_dir):
    clean = tmp_path / "clean"
    timed_run(pretokenize_cmd(corpus, clean, SIZES[0]))
    previous = tmp_path / "previous"  # a committed set (560 KB) that fits on the small disk
    timed_run(pretokenize_cmd(corpus_dir, previous, SIZES[1]))
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    done = run_on_small_disk(shlex.join(pretokenize_cmd(corpus, disk / "tok", SIZES[0])), disk, "1500k", kept,
                             setup=f"cp -a {shlex.quote(str(previous))} tok")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]  # above it only the progress bar
    assert re.fullmatch(rf"nanodata pretokenize: error: {re.escape(str(disk))}/tok/tokens_(val|train)_\d{{6}}\.npy: "
                        r"cannot write: no space left on the device; .*", error), error
    assert not list((kept / "tok").glob("*.tmp")) and not (kept / "tok" / "meta.json").exists()
    assert refused_or_clean(kept / "tok", {}) == "refused"
    timed_run(pretokenize_cmd(corpus, kept / "tok", SIZES[0]))  # the same directory, now with space
    assert same_tree(kept / "tok", clean) == []



FULL_DISK_RUNS = 20


def test_a_full_disk_stops_the_workers_every_time(corpus, tmp_path):
    """The full disk of the test above, many times over: each run ends within a minute with the one line, and no
    worker outlives it (a run once hung for 300 s in the worker pool's teardown)."""
    for attempt in range(FULL_DISK_RUNS):
        disk, kept = tmp_path / f"disk{attempt}", tmp_path / f"kept{attempt}"
        try:
            done = run_on_small_disk(shlex.join(pretokenize_cmd(corpus, disk / "tok", SIZES[0])), disk, "1500k", kept,
                                     timeout=60)
        except subprocess.TimeoutExpired:
            for pid in _running(disk):  # the hung run and its workers, started by this test
                os.kill(pid, signal.SIGKILL)
            pytest.fail(f"run {attempt} hung on a full disk")
        assert done.returncode == 2 and "Traceback" not in done.stderr, (attempt, done.stderr)
        error = done.stderr.strip().splitlines()[-1]
        assert re.fullmatch(rf"nanodata pretokenize: error: {re.escape(str(disk))}/tok/tokens_(val|train)_\d{{6}}\.npy: "
                            r"cannot write: no space left on the device; .*", error), (attempt, error)
        assert _running(disk) == [], f"run {attempt}: its processes outlived it"


def _running(disk) -> list[int]:
    """The processes whose command line names `disk` (a run's workers share its command line)."""
    found = subprocess.run(["pgrep", "-f", str(disk)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


TEARDOWN = """
import sys
import numpy as np
from nanodata.pipeline import pretokenize

def big(task):  # a row group's tokens, instantly: the workers are always sending when the writer fails
    return np.ones(1 << 20, np.uint16), 1

def nothing(*args):
    pass

pretokenize._tokenize_row_group, pretokenize._start_worker = big, nothing
for attempt in range(int(sys.argv[1])):
    try:
        with pretokenize.tokenize_in_order(2, ()) as tokenized:
            for n, _ in enumerate(tokenized(range(1000))):
                if n == 10:
                    raise OSError(28, "No space left on device")
    except OSError:
        print(attempt, flush=True)
"""


def test_the_workers_stop_when_the_writer_fails_while_they_send(tmp_path):
    """The writer fails while workers send results bigger than a pipe: the pool is stopped and joined every time.
    (Pool.terminate killed a worker mid-send holding the result queue's lock, and its teardown then waited on that
    lock for ever: most runs of this hung within 20 tries.)"""
    script = tmp_path / "teardown.py"
    script.write_text(TEARDOWN)
    proc = subprocess.Popen([sys.executable, str(script), str(FULL_DISK_RUNS)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the script and its workers
        out, _ = proc.communicate()
        pytest.fail(f"the workers' teardown hung after {len(out.split())} of {FULL_DISK_RUNS} tries")
    assert proc.returncode == 0, err
    assert out.split() == [str(i) for i in range(FULL_DISK_RUNS)]
