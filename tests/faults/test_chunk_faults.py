"""`nanodata chunk --workers 2` killed (-9) at seeded random moments, or out of disk: nothing partial under
the final name, and the re-run's output is byte-identical to a clean run's."""

import json
from pathlib import Path

import pytest
from faults import kill_at, kill_moments, nanodata_cmd, run, run_on_small_disk, timed_run

STD_HEADERS = Path("/usr/include/c++/12/bits")  # real C++: the compiler's standard library
TREE_FILES = ["stl_pair.h", "stl_vector.h", "vector.tcc", "stl_list.h", "list.tcc", "stl_algobase.h", "stl_heap.h"]
TIMING = {"seconds", "files_per_s", "mb_per_s", "output"}  # of the summary: all else must match


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunk-sources")
    headers = sorted(p for p in STD_HEADERS.iterdir() if p.suffix in (".h", ".tcc"))[:60]
    with open(root / "headers.jsonl", "w") as f:
        for path in headers:
            f.write(json.dumps({"text": path.read_text(), "path": path.name}) + "\n")
    tree = root / "tree" / "bits"
    tree.mkdir(parents=True)
    for name in TREE_FILES:
        (tree / name).write_text((STD_HEADERS / name).read_text())
    return root


def chunk_args(sources: Path, mode: str, output: Path) -> list[str]:
    source = ["--inputs", sources / "headers.jsonl"] if mode == "basic" else ["--project-dirs", sources / "tree"]
    return ["chunk", *source, "--mode", mode, "--output", output, "--workers", 2, "--max-tokens", 512,
            "--no-progress"]


def summary(output: Path) -> dict:
    done = json.loads(output.with_name(output.name + ".done").read_text())
    return {k: v for k, v in done.items() if k not in TIMING}


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_killed_runs_leave_nothing_partial_and_rerun_is_identical(sources, tmp_path, mode):
    clean = tmp_path / "clean" / "docs.jsonl"
    seconds = timed_run(nanodata_cmd(*chunk_args(sources, mode, clean)))
    out = tmp_path / "killed" / "docs.jsonl"
    for moment in kill_moments(seed=11 if mode == "basic" else 12, clean_seconds=seconds, count=5):
        kill_at(nanodata_cmd(*chunk_args(sources, mode, out)), moment)
        done = out.with_name(out.name + ".done")
        if out.exists():  # the final name appears whole, with its summary
            assert done.exists() and out.read_bytes() == clean.read_bytes()
        else:
            assert not done.exists()
        rerun = run(nanodata_cmd(*chunk_args(sources, mode, out)))
        assert rerun.returncode == 0, rerun.stderr
        assert out.read_bytes() == clean.read_bytes()
        assert summary(out) == summary(clean)
        out.unlink()
        done.unlink()
    leftovers = sorted(p.name for p in out.parent.iterdir())  # killed runs' work files were cleared
    assert not leftovers, leftovers


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_full_disk_is_one_line_and_rerun_with_space_is_identical(sources, tmp_path, mode):
    clean = tmp_path / "clean" / "docs.jsonl"
    assert run(nanodata_cmd(*chunk_args(sources, mode, clean))).returncode == 0
    disk, keep = tmp_path / "disk", tmp_path / "left"
    cmd = " ".join(f"'{a}'" for a in nanodata_cmd(*chunk_args(sources, mode, disk / "docs.jsonl")))
    done = run_on_small_disk(cmd, disk, "192k", keep)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "docs.jsonl" in lines[0] and "no space left" in lines[0], done.stderr
    left = sorted(p.name for p in keep.rglob("*") if p.is_file())
    assert "docs.jsonl" not in left and "docs.jsonl.done" not in left and not any(n.endswith(".tmp") for n in left)
    again = tmp_path / "again" / "docs.jsonl"
    assert run(nanodata_cmd(*chunk_args(sources, mode, again))).returncode == 0
    assert again.read_bytes() == clean.read_bytes() and summary(again) == summary(clean)
