"""Two `nanodata chunk` runs sharing one --cache, as real processes: the one that ends first cleans the cache up while
the other is still writing entries it has not recorded yet. Those entries are younger than the grace period, so
they survive, and a rerun of each run reuses every file it had."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

INCLUDE = Path("/usr/include/c++/12")
NANODATA = str(Path(sys.executable).with_name("nanodata"))
BASE = [NANODATA, "chunk", "--max-tokens", "512", "--no-progress", "--filters", "none", "--redact", "none",
        "--dedup", "exact"]


def _entries(cache: Path) -> int:
    return sum(1 for p in cache.glob("v*/entries/*/*") if p.is_file() and not p.name.endswith(".tmp"))


def _reuse(out: Path) -> dict:
    return json.loads(Path(f"{out}.done").read_text())["reuse"]


def test_two_runs_on_one_cache_keep_each_others_entries(tmp_path):
    slow, quick = tmp_path / "slow", tmp_path / "quick"
    for sub in ("bits", "debug"):  # ~190 files, several seconds on one worker
        shutil.copytree(INCLUDE / sub, slow / sub)
    quick.mkdir()
    for name in ("pool_allocator.h", "rc_string_base.h", "vstring_util.h"):  # files the slow run does not have
        shutil.copy(INCLUDE / "ext" / name, quick / name)
    cache = tmp_path / "cache"
    slow_run = BASE + ["--project-dirs", str(slow), "--cache", str(cache), "--workers", "1"]
    quick_run = BASE + ["--project-dirs", str(quick), "--cache", str(cache)]

    proc = subprocess.Popen(slow_run + ["--output", str(tmp_path / "slow1.jsonl")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while _entries(cache) < 10 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        quick_done = subprocess.run(quick_run + ["--output", str(tmp_path / "quick1.jsonl")], capture_output=True,
                                    text=True, timeout=300)
        assert quick_done.returncode == 0, quick_done.stderr
        overlapped = proc.poll() is None  # the quick run's cleanup ran while the slow run was writing entries
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert overlapped, "the slow run ended before the quick one: nothing was shared"
    slow1, quick1 = _reuse(tmp_path / "slow1.jsonl"), _reuse(tmp_path / "quick1.jsonl")
    assert slow1["files_chunked"] > 150 and quick1["files_chunked"] == 3
    assert quick1["cache"]["entries_deleted"] == 0  # the slow run's entries, unrecorded then, were left alone

    for run, out, first in ((slow_run, "slow2.jsonl", slow1), (quick_run, "quick2.jsonl", quick1)):
        done = subprocess.run(run + ["--output", str(tmp_path / out)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        again = _reuse(tmp_path / out)
        assert again["files_chunked"] == 0 and again["entries_rebuilt"] == 0, again
        assert again["files_reused"] == first["files_chunked"] + first["files_reused"]
