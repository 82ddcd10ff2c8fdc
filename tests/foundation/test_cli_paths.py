"""Path flags and gs://: a flag that takes a bucket reads or writes the bucket; one that needs a local path refuses a
gs:// value (or a typo of one) with one line naming the flag, exit 2, before any work. Nothing lands in the working
directory either way: pathlib would fold `gs://b/x` into a local folder `gs:` there (a run once wrote its JSONL and a
near-dedup work dir under ./gs:/bucket). A --cache or --output that cannot be a directory is one line too."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nanodata import storage

NANODATA = str(Path(sys.executable).with_name("nanodata"))
CPP = {"lib/shape.h": "#pragma once\nstruct Shape { int sides; };\ninline int sides_of(const Shape& s) { return s.sides; }\n",
       "app/main.cpp": '#include "shape.h"\nint count(const Shape& s) { return sides_of(s) + 1; }\n'}


def nanodata(cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([NANODATA, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=300)


def tree(root: Path) -> list[str]:
    """Everything under root (dot files included), so a `gs:` folder or a leftover probe shows."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def workdir(tmp_path) -> Path:
    """A fresh, empty working directory for the CLI."""
    (tmp_path / "cwd").mkdir()
    return tmp_path / "cwd"


def test_every_gs_path_flag_of_chunk_reads_or_writes_the_bucket(workdir, gcs_bucket):
    bucket = f"gs://{gcs_bucket}"
    for name, text in CPP.items():
        storage.write_bytes(f"{bucket}/tree/{name}", text.encode())
    alone = "int alone(int value) {\n  return value * 2 + value / 3 - 7;\n}\n"  # a benchmark item (> 32 bytes)
    storage.write_bytes(f"{bucket}/in.jsonl", (json.dumps({"text": alone, "path": "alone.cpp"}) + "\n").encode())
    storage.write_bytes(f"{bucket}/bench.jsonl", (json.dumps({"text": alone}) + "\n").encode())
    argv = ["chunk", "--inputs", f"{bucket}/in.jsonl", "--project-dirs", f"{bucket}/tree", "--decontaminate",
            f"{bucket}/bench.jsonl", "--cache", f"{bucket}/cache", "--no-progress", "--max-tokens", "256"]
    first = nanodata(workdir, *argv, "--output", "out.jsonl")
    assert first.returncode == 0, first.stderr
    summary = json.loads((workdir / "out.jsonl.done").read_text())
    assert summary["files_read"] == 3 and summary["reuse"]["files_chunked"] == 3
    assert summary["decontaminate"] == [f"{bucket}/bench.jsonl"] and summary["cleaning"]["files_dropped"] == 1
    assert any(name.startswith("v") for name in storage.list_names(f"{bucket}/cache"))  # the cache is the bucket's
    again = nanodata(workdir, *argv, "--output", "again.jsonl")
    assert again.returncode == 0, again.stderr
    assert json.loads((workdir / "again.jsonl.done").read_text())["reuse"]["files_reused"] == 3
    assert tree(workdir) == ["again.jsonl", "again.jsonl.done", "out.jsonl", "out.jsonl.done"]


LOCAL_ONLY = [  # (argv, the flag the one line names); {b} a bucket, {in} a local input that exists
    (["chunk", "--inputs", "{in}", "--output", "gs://{b}/out.jsonl"], "argument --output"),
    (["chunk", "--inputs", "{in}", "--output", "gs://{b}/out.jsonl", "--dedup", "exact"], "argument --output"),
    (["chunk", "--inputs", "{in}", "--output", "gs:/{b}/out.jsonl"], "argument --output"),  # a typo of gs://
    (["chunk", "--inputs", "{in}", "--output", "GS://{b}/out.jsonl"], "argument --output"),
    (["chunk", "--inputs", "{in}", "--parquet-dir", "gs://{b}/corpus"], "argument --parquet-dir"),
    (["chunk", "--inputs", "{in}", "--output", "out.jsonl", "--tokenizer", "gs://{b}/tok"], "tokenizer"),
    (["chunk", "--inputs", "{in}", "--output", "out.jsonl", "--cache", "gs:/{b}/cache"], "--cache"),
    (["download", "--base-url", "http://127.0.0.1:9/x", "--num-shards", "1", "--dir", "gs://{b}/raw"], "argument --dir"),
    (["tokenizer", "train", "--input", "{in}", "--vocab-size", "300", "--out", "gs://{b}/tok"], "argument --out"),
    (["tokenizer", "train", "--input", "gs://{b}/corpus", "--vocab-size", "300", "--out", "tok"], "gs:"),
    (["pretokenize", "--input", "{in}", "--out", "gs://{b}/tok"], "argument --out"),
    (["pretokenize", "--input", "gs://{b}/corpus", "--out", "tok"], "argument --input"),
    (["to-parquet", "--input", "{in}", "--out", "gs://{b}/corpus"], "argument --out"),
    (["to-parquet", "--input", "gs://{b}/in.jsonl", "--out", "corpus"], "--input"),
    (["report", "{in}", "--out", "gs://{b}/report"], "argument --out"),
    (["report", "gs://{b}/build"], "gs:"),
]


@pytest.mark.parametrize("argv, flag", LOCAL_ONLY, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_gs_value_where_a_local_path_goes_is_one_line_and_makes_nothing(workdir, tmp_path, argv, flag):
    local = tmp_path / "in.jsonl"
    local.write_text(json.dumps({"text": "int f() { return 1; }\n"}) + "\n")
    done = nanodata(workdir, *[a.format(b="nanodata-paths", **{"in": local}) for a in argv])
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"nanodata {argv[0]}") and flag in lines[0], lines
    if flag.startswith("argument"):  # refused by the parser: the value as typed, and what to do instead
        assert "a local" in lines[0] and "nanodata-paths" in lines[0] and "is needed, not a bucket" in lines[0]
    assert tree(workdir) == []


@pytest.mark.parametrize("cache, words", [
    ("{file}", "exists and is not a directory"),
    ("{file}/under", "is not a directory"),
    ("/proc/nanodata-cache", "cannot create a directory in /proc"),
    ("/sys/nanodata-cache", "cannot create a directory in /sys"),
])
def test_a_cache_that_cannot_be_a_directory_is_one_line_before_any_work(workdir, tmp_path, cache, words):
    (tmp_path / "file").write_text("x")
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "int f() { return 1; }\n"}) + "\n")
    before = tree(tmp_path)
    done = nanodata(workdir, "chunk", "--inputs", tmp_path / "in.jsonl", "--output", "out.jsonl", "--no-progress",
                    "--cache", cache.format(file=tmp_path / "file"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--cache" in done.stderr and words in done.stderr, done.stderr
    assert tree(tmp_path) == before and not os.path.exists(cache)


def test_an_output_where_nothing_can_be_written_is_one_line(workdir, tmp_path):
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "int f() { return 1; }\n"}) + "\n")
    for output in ("/sys/out.jsonl", "/proc/nanodata/out.jsonl"):
        done = nanodata(workdir, "chunk", "--inputs", tmp_path / "in.jsonl", "--output", output, "--no-progress")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip().count("\n") == 0 and "--output" in done.stderr and "cannot create" in done.stderr


@pytest.mark.parametrize("flag, value", [("--cache-keep-runs", "0"), ("--cache-grace-hours", "-1"),
                                         ("--cache-grace-hours", "nan")])
def test_retention_flags_out_of_range_are_one_line(workdir, tmp_path, flag, value):
    (tmp_path / "in.jsonl").write_text(json.dumps({"text": "int f() { return 1; }\n"}) + "\n")
    done = nanodata(workdir, "chunk", "--inputs", tmp_path / "in.jsonl", "--output", "out.jsonl", "--cache", "cache",
                    flag, value)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert f"argument {flag}: {value}" in done.stderr and tree(workdir) == []
