"""`nanodata chunk --parquet-dir`: the shards `chunk` + `to-parquet` make (same seed, val fraction, rows per
file), byte for byte, with no JSONL in between; bad combinations refused in one line before any work."""

import contextlib
import io
import json

import pyarrow.parquet as pq
import pytest
from cpp_projects import write_layers

from nanodata.cli import main
from nanodata.corpus.layout import CHUNK_SUMMARY, COMPLETE, MANIFEST, is_complete

SHARDS = ["--rows-per-file", "7", "--val-fraction", "0.2", "--seed", "5"]


def run(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_layers(tmp_path_factory.mktemp("tree"))


def texts(path):
    return sorted(pq.read_table(path).column("text").to_pylist())


@pytest.mark.parametrize("mode, block", [("basic", None), ("compilable", None), ("compilable", 1)])
def test_same_shards_as_chunk_then_to_parquet(tree, tmp_path, monkeypatch, mode, block):
    """block 1: every write is converted at once, so the run ends with no lines pending"""
    if block:
        monkeypatch.setattr("nanodata.pipeline.chunkbuild.writer.CONVERT_BLOCK", block)
    chunk = ["chunk", "--project-dirs", str(tree), "--mode", mode, "--max-tokens", "64", "--no-progress"]
    assert run(chunk + ["--output", str(tmp_path / "docs.jsonl")])[0] == 0
    assert run(["to-parquet", "--input", str(tmp_path / "docs.jsonl"), "--out", str(tmp_path / "two")] + SHARDS)[0] == 0
    (tmp_path / "one").mkdir()  # an empty directory is taken
    assert run(chunk + ["--parquet-dir", str(tmp_path / "one")] + SHARDS)[0] == 0

    one, two = tmp_path / "one", tmp_path / "two"
    parquet = sorted(p.name for p in two.glob("*.parquet"))
    assert sorted(p.name for p in one.glob("*.parquet")) == parquet and len(parquet) > 2
    for name in parquet:  # the same docs in the same order: the very same bytes
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    assert texts(one / "val_shard.parquet") and texts(one / "val_shard.parquet") == texts(two / "val_shard.parquet")
    manifests = [json.loads((d / MANIFEST).read_text()) for d in (one, two)]
    assert manifests[0] | {"created_by": ""} == manifests[1] | {"created_by": ""}  # checksums included
    assert manifests[0]["created_by"].endswith("chunk --parquet-dir")
    assert is_complete(one) and sorted(p.name for p in one.iterdir()) == sorted(
        [*parquet, MANIFEST, COMPLETE, CHUNK_SUMMARY])  # no spool, no progress file, no JSONL
    summary = json.loads((one / CHUNK_SUMMARY).read_text())
    assert summary["docs"] == sum(m["rows"] for m in manifests[0]["shards"]) + manifests[0]["val"]["rows"]
    assert not list(tmp_path.glob(".one*"))  # the work directory was renamed into place


def test_help_names_the_flag_and_shares_to_parquet_defaults():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["chunk", "--help"]) == 0
    text = " ".join(out.getvalue().split())
    assert "--parquet-dir DIR" in text and "as `nanodata to-parquet` would" in text
    for words in ("train docs per shard, at most", "(default: 50000)", "(default: 0.01)", "val split (default: 42)"):
        assert words in text


@pytest.mark.parametrize("extra, words", [
    (["--parquet-dir", "{dir}", "--append"], "--append: appends to an --output JSONL"),
    (["--output", "{dir}/x.jsonl", "--seed", "3"], "--seed 3: applies to --parquet-dir"),
    (["--output", "{dir}/x.jsonl", "--parquet-dir", "{dir}/p"], "not allowed with argument"),
    (["--parquet-dir", "{full}"], "is not empty"),
    (["--parquet-dir", "{file}"], "is not a directory"),
    (["--parquet-dir", "gs://bucket/corpus"], "a local directory is needed"),
    (["--parquet-dir", "{dir}/p", "--rows-per-file", "0"], "--rows-per-file: 0 is out of range"),
])
def test_bad_combinations_are_one_line_before_any_work(tree, tmp_path, extra, words):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    (tmp_path / "file").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["chunk", "--project-dirs", str(tree), "--no-progress"] + [
        a.format(dir=tmp_path, full=tmp_path / "full", file=tmp_path / "file") for a in extra]
    code, err = run(argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_files_over_a_size_limit_are_named_in_the_summary_and_the_report(tree, tmp_path, caplog):
    from nanodata.report.corpus_report import write_report

    sizes = {str(p): p.stat().st_size for p in (tree / "shapes").iterdir()}
    limit = sorted(sizes.values())[len(sizes) // 2]
    over = sorted(({"file": f, "bytes": n} for f, n in sizes.items() if n > limit), key=lambda e: e["file"])
    with caplog.at_level("WARNING"):
        code, _ = run(["chunk", "--project-dirs", str(tree), "--no-progress", "--max-file-bytes", str(limit),
                       "--parquet-dir", str(tmp_path / "c"), "--val-fraction", "0"])
    assert code == 0 and over
    for entry in over:  # a log line each, with the size
        assert any(entry["file"] in r.message and str(entry["bytes"]) in r.message for r in caplog.records)
    summary = json.loads((tmp_path / "c" / CHUNK_SUMMARY).read_text())
    assert summary["too_big"] == over and summary["files_too_big"] == len(over)
    index = write_report(tmp_path / "c")
    report = json.loads((index.parent / "report.json").read_text())
    assert report["too_big"] == {"max_file_bytes": limit, "files": len(over), "listed": over}
    html = index.read_text()
    assert "Files over --max-file-bytes" in html and all(e["file"] in html for e in over)


def test_a_failed_run_leaves_nothing_and_a_killed_runs_work_is_cleared(tree, tmp_path):
    (tmp_path / "empty" / "p").mkdir(parents=True)
    (tmp_path / "empty" / "p" / "e.cc").write_text("")
    code, err = run(["chunk", "--project-dirs", str(tmp_path / "empty"), "--parquet-dir", str(tmp_path / "out"),
                     "--no-progress"])
    assert code == 2 and "no usable C++ input" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # no DIR, no work directory, no table
    (tmp_path / ".out.tmp").mkdir()  # what a killed run left: a half-built corpus
    (tmp_path / ".out.tmp" / "shard_00000.parquet").write_bytes(b"half")
    assert run(["chunk", "--project-dirs", str(tree), "--parquet-dir", str(tmp_path / "out"), "--no-progress"])[0] == 0
    assert is_complete(tmp_path / "out") and sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"]
    assert (tmp_path / "out" / "shard_00000.parquet").read_bytes() != b"half"
