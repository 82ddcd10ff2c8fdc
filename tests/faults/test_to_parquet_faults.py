"""`nanodata to-parquet` killed with -9 at seeded random moments, and run out of disk.

The input holds bad lines of every kind (not UTF-8 included) among the good ones. After a kill or a full
disk, a re-run of the same command finishes the directory to exactly the bytes of a clean run: shards,
val shard, manifest (bad-line counts and line numbers included), _COMPLETE and the checkpoint alike.
"""

import json
import re
import shlex

import pytest
from corpus import make_docs
from faults import kill_at, kill_moments, nanodata_cmd, run, run_on_small_disk, same_tree, timed_run

SEED = 1010
KILLS = 6
BAD_LINES = [b"{torn", b"", '{"text": "caf\u00e9"}'.encode("latin-1"), b'["a", "list"]', b'{"body": "x"}',
             b'{"text": 7}', b'{"text": "  "}', b'{"text": "x", "n_tokens": -3}', b'{"text": "\\ud800"}']
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d [\d:,]+ (INFO|WARNING) nanodata\.pipeline\.to_parquet: ")
KINDS = {"invalid_json": 2, "not_utf8": 1, "not_an_object": 1, "missing_text": 1, "non_string_text": 1,
         "empty_text": 1, "bad_metadata": 1, "invalid_unicode": 1}  # times each kind is in BAD_LINES


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    """~25 MB of chunker-like docs, the bad lines spread over it (each of them twice)."""
    path = tmp_path_factory.mktemp("input") / "docs.jsonl"
    docs = [d or "void f();" for d in make_docs(48_000, seed=SEED, max_words=240)]
    after = {7 + k * len(docs) // (2 * len(BAD_LINES)): BAD_LINES[k % len(BAD_LINES)] for k in range(2 * len(BAD_LINES))}
    with open(path, "wb") as f:
        for i, doc in enumerate(docs):
            f.write(json.dumps({"text": doc, "n_tokens": len(doc.split()), "mode": "basic", "source": f"f{i}.cpp",
                                "kind": "function"}).encode() + b"\n" + (after[i] + b"\n" if i in after else b""))
    return path


def to_parquet_cmd(jsonl, out) -> list[str]:
    return nanodata_cmd("to-parquet", "--input", jsonl, "--out", out, "--rows-per-file", 1500,
                        "--row-group-size", 256, "--val-fraction", 0.02)


@pytest.fixture(scope="module")
def clean(jsonl, tmp_path_factory):
    """(output dir of an uninterrupted run, its wall time)."""
    out = tmp_path_factory.mktemp("clean") / "out"
    seconds = timed_run(to_parquet_cmd(jsonl, out))
    manifest = json.loads((out / "manifest.json").read_text())
    assert {k: v["count"] for k, v in manifest["bad_lines"].items()} == {k: 2 * n for k, n in KINDS.items()}
    assert len(manifest["shards"]) >= 10
    return out, seconds


def test_kill_9_then_rerun_gives_the_clean_bytes(jsonl, clean, tmp_path):
    clean_out, seconds = clean
    mid_write = 0
    for i, moment in enumerate(kill_moments(SEED, seconds, KILLS)):
        out = tmp_path / f"out{i}"
        assert kill_at(to_parquet_cmd(jsonl, out), moment) in (None, 0)
        mid_write += (out / "shard_00000.parquet").exists() and not (out / "_COMPLETE").exists()
        timed_run(to_parquet_cmd(jsonl, out))
        assert same_tree(out, clean_out) == [], f"re-run after a kill at {moment:.2f}s of {seconds:.2f}s"
    assert mid_write, "no kill landed while shards were being written"


def test_full_disk_names_the_file_then_a_rerun_gives_the_clean_bytes(jsonl, clean, tmp_path):
    clean_out, _ = clean
    size_kb = sum(p.stat().st_size for p in clean_out.iterdir()) // 1024 // 2  # half the output fits
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    done = run_on_small_disk(shlex.join(to_parquet_cmd(jsonl, disk / "out")), disk, f"{size_kb}k", kept)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if not LOG_LINE.match(line)]  # the bad lines are logged
    assert len(errors) == 1 and re.fullmatch(
        rf"nanodata to-parquet: error: {re.escape(str(disk))}/out/[\w.]+: cannot write: no space left on the "
        r"device; .*", errors[0]), done.stderr
    left = {p.name for p in (kept / "out").iterdir()}
    assert not {"manifest.json", "_COMPLETE", "val_shard.parquet"} & left and not any(n.endswith(".tmp") for n in left)
    shards = sorted(n for n in left if n.endswith(".parquet"))
    assert shards and all((kept / "out" / n).read_bytes() == (clean_out / n).read_bytes() for n in shards)
    assert run(to_parquet_cmd(jsonl, kept / "out")).returncode == 0  # the same directory, now with space
    assert same_tree(kept / "out", clean_out) == []


@pytest.mark.parametrize("size", ["8k", "16k"])  # the disk fills at an SVG plot, or at report.json
def test_report_on_a_full_disk_names_the_file_then_a_rerun_gives_the_clean_report(clean, tmp_path, size):
    clean_out, _ = clean
    timed_run(nanodata_cmd("report", clean_out, "--out", tmp_path / "clean_report"))
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    done = run_on_small_disk(shlex.join(nanodata_cmd("report", clean_out, "--out", disk / "report")), disk, size, kept)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert re.fullmatch(rf"nanodata report: error: {re.escape(str(disk))}/report/[\w.]+: cannot write: no space "
                        r"left on the device; .*\n", done.stderr), done.stderr
    left = sorted(p.name for p in (kept / "report").iterdir())
    assert left and "index.html" not in left  # written last, so a browser never sees a report missing parts
    assert all((kept / "report" / n).read_bytes() == (tmp_path / "clean_report" / n).read_bytes() for n in left)
    timed_run(nanodata_cmd("report", clean_out, "--out", kept / "report"))
    assert same_tree(kept / "report", tmp_path / "clean_report") == []
