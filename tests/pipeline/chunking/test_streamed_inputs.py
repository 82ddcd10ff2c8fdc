"""Inputs at the real corpus's scale: .jsonl / .gz / .zst, local or gs://, streamed; partition-invariant
output; a plain folder of C++ files; a reader never holds a whole input (checked under an rlimit)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from cpp_projects import LAYERS, STD_HEADERS, STD_SUBSET, write_layers, write_projects

from nanodata import storage
from nanodata.pipeline.chunkbuild import chunk_to_jsonl

RECORDS = [{"text": text, "path": name, "repo": "layers"} for name, text in LAYERS.items()]
RECORDS += [{"text": (STD_HEADERS / name).read_text(), "path": name, "repo": "std"} for name in STD_SUBSET[:4]]


def _jsonl_bytes() -> bytes:
    return "".join(json.dumps(r) + "\n" for r in RECORDS).encode()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The same records as .jsonl, .jsonl.gz and .jsonl.zst."""
    root = tmp_path_factory.mktemp("inputs")
    data = _jsonl_bytes()
    (root / "code.jsonl").write_bytes(data)
    (root / "code.jsonl.gz").write_bytes(gzip.compress(data))
    (root / "code.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(data))
    return root


def _chunk(out: Path, **kw) -> bytes:
    chunk_to_jsonl(out, max_tokens=256, **kw)
    return out.read_bytes()


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_compressed_inputs_give_the_same_docs(inputs, tmp_path, mode):
    plain = _chunk(tmp_path / "plain.jsonl", inputs=[inputs / "code.jsonl"], mode=mode)
    assert plain.count(b"\n") > len(RECORDS)
    for name in ("code.jsonl.gz", "code.jsonl.zst"):
        assert _chunk(tmp_path / f"{name}.out", inputs=[inputs / name], mode=mode) == plain, name


def test_inputs_read_from_gcs(inputs, tmp_path, gcs_bucket):
    plain = _chunk(tmp_path / "plain.jsonl", inputs=[inputs / "code.jsonl"], mode="compilable")
    for name in ("code.jsonl", "code.jsonl.gz", "code.jsonl.zst"):
        storage.write_bytes(f"gs://{gcs_bucket}/raw/{name}", (inputs / name).read_bytes())
        got = _chunk(tmp_path / f"gs-{name}.out", inputs=[f"gs://{gcs_bucket}/raw/{name}"], mode="compilable")
        assert got == plain, name


def test_corrupt_and_missing_compressed_inputs_are_problems_not_crashes(inputs, tmp_path):
    data = (inputs / "code.jsonl.gz").read_bytes()
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])  # truncated mid-stream
    (tmp_path / "junk.jsonl.zst").write_bytes(b"not zstd at all\n")
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[inputs / "code.jsonl", tmp_path / "cut.jsonl.gz",
                                                           tmp_path / "junk.jsonl.zst", tmp_path / "absent.jsonl"])
    problems = "\n".join(summary["problems"])
    assert "cut.jsonl.gz:" in problems and "cannot decompress" in problems
    assert "junk.jsonl.zst:1: cannot decompress" in problems
    assert "absent.jsonl: input file does not exist" in problems
    assert summary["files_read"] >= len(RECORDS)  # the good input and the readable head of the cut one


@pytest.mark.parametrize("mode", ["compilable", "project", "cross-file"])
def test_global_modes_same_output_for_any_partition_size_and_workers(tmp_path, mode):
    """Partitions of ~1 KB (every input split), ~20 KB and one partition; 1 and 2 workers: identical bytes."""
    layers = write_layers(tmp_path / "layers")
    projects = write_projects(tmp_path / "projects")
    jsonl = tmp_path / "std.jsonl"
    jsonl.write_bytes(_jsonl_bytes())
    kw = {"inputs": [jsonl], "project_dirs": [layers, projects], "mode": mode}
    reference = _chunk(tmp_path / "ref.jsonl", **kw)
    for partition_mb, workers in [(0.001, 1), (0.02, 2), (256, 2)]:
        got = _chunk(tmp_path / f"p{partition_mb}-{workers}.jsonl", partition_mb=partition_mb, workers=workers, **kw)
        assert got == reference, (partition_mb, workers)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # staging and dedupe files cleaned up


def test_a_plain_folder_of_cpp_files_is_one_project(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    for name, text in LAYERS.items():
        (folder / name).write_text(text)
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[folder], mode="compilable", max_tokens=256)
    assert summary["files_read"] == len(LAYERS)
    docs = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {d["source"] for d in docs} == {f"loose/{name}" for name in LAYERS}
    # cross-file resolution works inside the folder: calls.cpp's clamp_int pulls helper_from_other_file along
    assert any("int clamp_int" in d["text"] and "int helper_from_other_file" in d["text"] for d in docs)


MEMORY_PROBE = r"""
import resource, sys
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from nanodata.cli import main
code = main(sys.argv[2:])
print("VmPeak", [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmPeak")][0])
sys.exit(code)
"""


def _probe(limit: int, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(limit), *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_reader_never_holds_a_whole_input(tmp_path, mode):
    """An input 3x larger than the headroom a memory limit leaves: a reader holding it would die.

    The limit is the address space a run over a tiny input peaked at, plus 100 MB; the big input
    is 300 MB of records (mostly over the --max-file-bytes given, so cheap to skip) in a .gz
    (decompressed as a stream) and plain."""
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl.gz"
    small.write_bytes(_jsonl_bytes())
    filler = json.dumps({"text": "x" * 600_000}) + "\n"
    with gzip.open(big, "wt", compresslevel=1) as f:
        f.write(_jsonl_bytes().decode())
        for _ in range(500):
            f.write(filler)
    args = ["chunk", "--mode", mode, "--max-tokens", "256", "--no-progress", "--max-file-bytes", "500000"]
    baseline = _probe(0, [*args, "--inputs", str(small), "--output", str(tmp_path / "a.jsonl")])
    assert baseline.returncode == 0, baseline.stderr
    limit = int(baseline.stdout.split("VmPeak")[-1].strip().strip("[]").split()[0]) + 100 * 2 ** 20
    for source in (big, tmp_path / "big.jsonl"):
        if source.suffix != ".gz":
            source.write_bytes(gzip.decompress(big.read_bytes()))
        run = _probe(limit, [*args, "--inputs", str(source), "--output", str(tmp_path / "b.jsonl")])
        assert run.returncode == 0, run.stderr[-2000:]
        done = json.loads((tmp_path / "b.jsonl.done").read_text())
        assert done["files_skipped"] == 500 and done["files_read"] == len(RECORDS)
        assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
