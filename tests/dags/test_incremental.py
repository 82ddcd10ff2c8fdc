"""Nightly rebuilds reuse each file's work (issue 30): the corpus after edits, adds, deletes and renames is
byte-identical to a build of the changed input into an empty destination, in every mode and at two partition sizes,
and only what changed is chunked again. The steps run as the DAG calls them (tests/dags/dag_data.run_steps)."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from dag_data import run_steps, write_cpp_source

from nanodata import storage
from nanodata.jobs import cpp_corpus
from nanodata.storage.entries import EntryStore

STD = Path("/usr/include/c++/12/bits")
PARAMS = {"max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 40, "val_fraction": 0.1}
MODES = ("basic", "dep-aware", "cross-file", "project", "compilable")


def _source(root: Path) -> Path:
    src = write_cpp_source(root)
    for name in ("stl_pair.h", "stl_heap.h", "stl_stack.h"):
        shutil.copy(STD / name, src / "projA" / name)
    shutil.copy(STD / "stl_queue.h", src / "projB" / "math" / "queue.h")
    records = [{"text": (STD / name).read_text(), "path": name, "repo": "std"}
               for name in ("char_traits.h", "stl_tempbuf.h", "stl_raw_storage_iter.h")]
    records.append({"text": "int lone() { return 7; }\n"})  # no path: named by its input and line number
    with open(src / "extra.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    return src


def _edit(src: Path) -> None:
    """A night's changes: a line edited in a tree file and in a JSONL record, a file added, one deleted, one
    renamed; a record inserted at the top (every later line number moves) and one deleted."""
    steps = src / "projA" / "steps.cpp"
    steps.write_text(steps.read_text().replace("acc = acc * 8 + k;", "acc = acc * 8 + k + 1;"))
    (src / "projB" / "math" / "extra.h").write_text("#pragma once\ninline int added(int a) { return a * 3; }\n")
    (src / "projA" / "stl_stack.h").unlink()
    (src / "projA" / "stl_heap.h").rename(src / "projA" / "heap_renamed.h")
    lines = (src / "extra.jsonl").read_text().splitlines(keepends=True)
    edited = json.loads(lines[3])
    edited["text"] = edited["text"].replace("_GLIBCXX", "_GLIBCXX_EDITED", 1)
    new = json.dumps({"text": "int inserted() { return 1; }\n", "path": "inserted.cpp", "repo": "misc"}) + "\n"
    (src / "extra.jsonl").write_text(new + "".join(lines[:3]) + json.dumps(edited) + "\n" + "".join(lines[5:]))


def _corpus(dest: str, key: str) -> dict[str, bytes]:
    """The build's files but its report (which names times): the corpus a trainer reads."""
    build = f"{dest}/builds/{key}"
    return {n: storage.read_bytes(f"{build}/{n}") for n in storage.list_names(build) if not n.startswith("report/")}


def _reuse(chunks: list[dict], stage: str) -> dict:
    return cpp_corpus.reuse_stats(cpp_corpus.partition_summaries(stage)[1])


def _build(src, dest, mode, partition_mb, **params):
    planned, chunks, _ = run_steps(src, str(dest), {**PARAMS, "mode": mode, **params}, partition_mb)
    return planned, _corpus(str(dest), planned["key"]), _reuse(chunks, planned["stage"])


@pytest.mark.parametrize("partition_mb", [0.01, 256])
@pytest.mark.parametrize("mode", MODES)
def test_rebuild_after_edits_adds_deletes_renames_equals_a_fresh_build(tmp_path, mode, partition_mb):
    src = _source(tmp_path / "src")
    _, _, first = _build(src, tmp_path / "dest", mode, partition_mb)
    # an empty cache: every file chunked but, in local modes, the record repeating projA/util.h, which finds its
    # copy's entry (in the global modes it is in another project, so it is parsed once but emitted twice)
    repeats = int(mode in ("basic", "dep-aware"))
    assert first["files_reused"] == repeats and first["files_chunked"] > 10
    _edit(src)
    planned, rebuilt, reuse = _build(src, tmp_path / "dest", mode, partition_mb)
    fresh_planned, fresh, fresh_reuse = _build(src, tmp_path / "fresh", mode, partition_mb)
    assert planned["key"] == fresh_planned["key"] and rebuilt == fresh
    assert fresh_reuse["files_reused"] == repeats
    assert reuse["files_reused"] > 0 and reuse["entries_rebuilt"] == 0
    if mode in ("basic", "dep-aware"):  # a file's docs depend on it alone: the changed and new files are chunked
        # steps.cpp, extra.h, the edited record and the inserted one (a rename keeps the content, hence the entry)
        assert reuse["files_chunked"] == 4, reuse
    else:  # the global modes re-emit the projects whose visible files changed: projA, projB, misc, std; not dup
        assert reuse["by_project"]["dup"]["files_reused"] == 1 and reuse["by_project"]["dup"]["files_chunked"] == 0
        assert sum(c["files_parsed"] for c in reuse["by_project"].values()) == 4


def test_corrupt_truncated_and_deleted_entries_are_rebuilt_and_the_corpus_is_unchanged(tmp_path):
    src = _source(tmp_path / "src")
    dest = tmp_path / "dest"
    _build(src, dest, "basic", 256)
    entries = sorted((dest / ".cache" / "v3" / "entries").rglob("*"))
    entries = [p for p in entries if p.is_file() and b"int step_" not in p.read_bytes()]  # not steps.cpp's (below)
    data = bytearray(entries[0].read_bytes())
    data[-1] ^= 0xFF  # one bit flipped in the payload
    entries[0].write_bytes(bytes(data))
    entries[1].write_bytes(entries[1].read_bytes()[:40])  # truncated
    entries[2].unlink()  # deleted
    steps = src / "projA" / "steps.cpp"  # a change, so the build is not up to date
    steps.write_text(steps.read_text() + "int more() { return 2; }\n")
    _, rebuilt, reuse = _build(src, dest, "basic", 256)
    _, fresh, _ = _build(src, tmp_path / "fresh", "basic", 256)
    assert rebuilt == fresh
    assert reuse["entries_rebuilt"] == 2 and reuse["files_chunked"] == 4  # 2 corrupt, 1 deleted, steps.cpp
    assert all(EntryStore(str(dest / ".cache")).get(bytes.fromhex(p.name))[1] == "hit" for p in entries[:3])


def test_reuse_off_chunks_every_file_and_gives_the_same_corpus(tmp_path):
    src = _source(tmp_path / "src")
    _build(src, tmp_path / "dest", "compilable", 0.01)
    _edit(src)
    _, again, reuse = _build(src, tmp_path / "dest", "compilable", 0.01, reuse=False)
    _, fresh, _ = _build(src, tmp_path / "fresh", "compilable", 0.01)
    assert again == fresh and reuse["files_reused"] == 0 and reuse["files_chunked"] > 10


def test_a_change_to_an_included_project_re_emits_the_projects_that_include_it(tmp_path):
    src = tmp_path / "src"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "shape.h").write_text("#pragma once\nstruct Shape { int sides; };\n"
                                         "inline int sides_of(const Shape& s) { return s.sides; }\n")
    (src / "app").mkdir()
    (src / "app" / "main.cpp").write_text('#include "shape.h"\nint count(const Shape& s) { return sides_of(s) + 1; }\n')
    (src / "other").mkdir()
    (src / "other" / "alone.cpp").write_text("int alone(int v) { return v * 2; }\n")
    _build(src, tmp_path / "dest", "compilable", 256)
    (src / "lib" / "shape.h").write_text("#pragma once\nstruct Shape { int sides; int color; };\n"
                                         "inline int sides_of(const Shape& s) { return s.sides; }\n")
    _, rebuilt, reuse = _build(src, tmp_path / "dest", "compilable", 256)
    _, fresh, _ = _build(src, tmp_path / "fresh", "compilable", 256)
    assert rebuilt == fresh
    by = reuse["by_project"]
    assert by["lib"]["files_parsed"] == 1 and by["lib"]["files_chunked"] == 1
    assert by["app"]["files_parsed"] == 0 and by["app"]["files_chunked"] == 1  # not changed, but it sees lib
    assert by["other"]["files_reused"] == 1 and by["other"]["files_chunked"] == 0
    shards = b"".join(v for k, v in rebuilt.items() if k.endswith(".parquet"))
    assert b"color" in shards  # app's doc pulls the changed Shape in


def test_cleanup_keeps_the_entries_of_the_last_builds(tmp_path):
    src = tmp_path / "src"
    (src / "p").mkdir(parents=True)
    dest = str(tmp_path / "dest")
    store = EntryStore(f"{dest}/.cache")
    for night in range(4):  # each night one file replaced by a new one
        for old in (src / "p").glob("*.cpp"):
            old.unlink()
        (src / "p" / f"night{night}.cpp").write_text(f"int night_{night}(int v) {{ return v + {night}; }}\n")
        (src / "p" / "same.cpp").write_text("int same(int v) { return v; }\n")
        planned, _, _ = run_steps(src, dest, {**PARAMS, "mode": "basic"}, 256)
        for path in (p for p in Path(dest, ".cache").rglob("*") if p.is_file()):  # a night later: past the grace
            os.utime(path, (time.time() - 2 * 86_400,) * 2)
        cleaned = cpp_corpus.cleanup(dest, planned["key"], cache_keep_runs=2)
        assert cleaned["cache"]["builds_kept"] == min(night + 1, 2)
    # same.cpp's entry and the last two nights' files are kept; nights 0 and 1 are gone
    assert store.size()["entries"] == 3 and cleaned["cache"]["entries_deleted"] == 1
    assert len(storage.list_names(f"{dest}/.cache/v3/used")) == 2


def test_a_gcs_tree_is_reused_from_the_listing_without_reading_unchanged_files(tmp_path, gcs_bucket, monkeypatch):
    src = _source(tmp_path / "src")
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        storage.write_bytes(f"gs://{gcs_bucket}/src/{path.relative_to(src).as_posix()}", path.read_bytes())
    dest = f"gs://{gcs_bucket}/dest"
    _build(f"gs://{gcs_bucket}/src", dest, "basic", 0.01)
    changed = src / "projA" / "steps.cpp"
    storage.write_bytes(f"gs://{gcs_bucket}/src/projA/steps.cpp", changed.read_bytes() + b"int more() { return 2; }\n")
    from nanodata.pipeline.chunkbuild import sources

    read = []
    real = sources.storage.read_bytes
    monkeypatch.setattr(sources.storage, "read_bytes", lambda uri: read.append(str(uri)) or real(uri))
    _, _, reuse = _build(f"gs://{gcs_bucket}/src", dest, "basic", 0.01)
    sources_read = [u.rsplit("/", 2)[-2:] for u in read if u.startswith(f"gs://{gcs_bucket}/src/")]
    assert sources_read == [["projA", "steps.cpp"]]  # the one changed tree file (the JSONL is streamed, not read so)
    assert reuse["files_chunked"] == 1 and reuse["files_reused"] > 10
