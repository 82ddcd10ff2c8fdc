"""`nanodata chunk --cache DIR`: each file's result is reused by later runs, the output byte-identical to a run
without the cache, whatever the worker count; a chunker format bump invalidates every entry; a killed run leaves no
entry a later run trusts; retention keeps the last runs' entries."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nanodata.errors import NanodataError
from nanodata.pipeline.chunking import chunk_to_jsonl, reuse
from nanodata.storage.entries import EntryStore

STD = Path("/usr/include/c++/12/bits")
NANODATA = str(Path(sys.executable).with_name("nanodata"))
SETTINGS = {"max_tokens": 512, "filters": "none", "redact": "none"}


@pytest.fixture
def source(tmp_path):
    tree = tmp_path / "tree"
    for project, names in {"a": ("stl_pair.h", "stl_heap.h"), "b": ("stl_stack.h", "stl_queue.h")}.items():
        (tree / project).mkdir(parents=True)
        for name in names:
            shutil.copy(STD / name, tree / project / name)
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps({"text": (STD / n).read_text()}) + "\n"
                             for n in ("char_traits.h", "stl_tempbuf.h")))
    return jsonl, tree


def _run(out, source, **settings):
    jsonl, tree = source
    return chunk_to_jsonl(out, inputs=[jsonl], project_dirs=[tree], **{**SETTINGS, **settings})


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_cached_runs_equal_an_uncached_run_for_any_worker_count(tmp_path, source, mode):
    reference = _run(tmp_path / "ref.jsonl", source, mode=mode)
    assert reference["reuse"] is None
    first = _run(tmp_path / "one.jsonl", source, mode=mode, cache=tmp_path / "cache", workers=2)
    second = _run(tmp_path / "two.jsonl", source, mode=mode, cache=tmp_path / "cache")
    for out in ("one", "two"):
        assert (tmp_path / f"{out}.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert first["reuse"]["files_reused"] == 0 and first["reuse"]["files_chunked"] == 6
    assert second["reuse"]["files_reused"] == 6 and second["reuse"]["bytes_chunked"] == 0
    assert second["fidelity"] == reference["fidelity"] and second["cleaning"] == reference["cleaning"]


def test_a_chunker_format_bump_invalidates_every_entry(tmp_path, source, monkeypatch):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache")
    monkeypatch.setattr(reuse, "CHUNK_FORMAT", reuse.CHUNK_FORMAT + 1)
    bumped = _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache")
    assert bumped["reuse"]["files_reused"] == 0 and bumped["reuse"]["files_chunked"] == 6
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "two.jsonl").read_bytes()


def test_settings_that_change_the_output_miss_and_the_rest_hit(tmp_path, source):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache")
    assert _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache", max_tokens=1024)["reuse"]["files_reused"] == 0
    assert _run(tmp_path / "three.jsonl", source, cache=tmp_path / "cache", workers=2,
                partition_mb=0.01)["reuse"]["files_reused"] == 6


def test_no_reuse_chunks_every_file_and_retention_keeps_the_last_runs(tmp_path, source):
    _run(tmp_path / "one.jsonl", source, cache=tmp_path / "cache", cache_keep_runs=1)
    again = _run(tmp_path / "two.jsonl", source, cache=tmp_path / "cache", reuse=False, cache_keep_runs=1)
    assert again["reuse"]["files_chunked"] == 6 and again["reuse"]["files_reused"] == 0
    other = _run(tmp_path / "three.jsonl", source, cache=tmp_path / "cache", max_tokens=1024, cache_keep_runs=1)
    assert other["reuse"]["cache"]["entries_deleted"] == 6 and other["reuse"]["cache"]["entries"] == 6


def test_a_killed_run_leaves_no_entry_a_later_run_trusts(tmp_path):
    tree = tmp_path / "bits"
    shutil.copytree(STD, tree / "std")
    cache = tmp_path / "cache"
    base = [NANODATA, "chunk", "--project-dirs", str(tree), "--max-tokens", "512", "--no-progress", "--filters",
            "none", "--redact", "none", "--dedup", "exact"]
    args = base + ["--cache", str(cache)]
    proc = subprocess.Popen(args + ["--output", str(tmp_path / "killed.jsonl"), "--workers", "2"],
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    entries = cache / "v1" / "entries"
    while time.monotonic() < deadline and sum(1 for p in entries.rglob("*") if p.is_file()) < 20:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for child in subprocess.run(["pgrep", "-f", str(cache)], capture_output=True, text=True).stdout.split():
        os.kill(int(child), signal.SIGKILL)  # the pool's workers, orphaned by the kill
    store = EntryStore(str(cache))
    for path in (p for p in entries.rglob("*") if p.is_file() and not p.name.endswith(".tmp")):
        assert store.get(bytes.fromhex(path.name))[1] == "hit", path
    subprocess.run(args + ["--output", str(tmp_path / "after.jsonl")], check=True, capture_output=True)
    subprocess.run(base + ["--output", str(tmp_path / "ref.jsonl")], check=True, capture_output=True)
    assert (tmp_path / "after.jsonl").read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    summary = json.loads((tmp_path / "after.jsonl.done").read_text())
    assert summary["reuse"]["files_reused"] >= 20 and summary["reuse"]["entries_rebuilt"] == 0


def test_a_bad_cache_is_one_line_naming_the_flag(tmp_path, source):
    with pytest.raises(NanodataError, match=r"^--cache: 'gs:/x': malformed gs:// URI"):
        _run(tmp_path / "out.jsonl", source, cache="gs:/x")
    result = subprocess.run([NANODATA, "chunk", "--inputs", str(source[0]), "--output", str(tmp_path / "o.jsonl"),
                             "--cache", str(tmp_path / "c"), "--cache-keep-runs", "-1"], capture_output=True, text=True)
    assert result.returncode == 2 and "--cache-keep-runs" in result.stderr and "Traceback" not in result.stderr
