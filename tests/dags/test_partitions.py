"""The build steps over partitions: the corpus is the same however it is cut, and equal to one CLI run.

The steps run as the DAG calls them (plan, parse, index, chunk, merge, to_parquet), over a source
holding a .jsonl, a .jsonl.gz and C++ project directories, locally and in the GCS emulator.
"""

import gzip
import json
import shutil
from pathlib import Path

import pytest
from dag_data import run_steps, write_cpp_source

from nanodata import storage
from nanodata.pipeline.chunking import chunk_to_jsonl
from nanodata.jobs import cpp_corpus
from nanodata.pipeline.to_parquet import jsonl_to_parquet

STD = Path("/usr/include/c++/12/bits")
PARAMS = {"max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 40, "val_fraction": 0.1}
# every input split (~2 KB), a few partitions (~40 KB), one partition (the default)
PARTITION_MBS = (0.002, 0.04, 256)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    src = write_cpp_source(tmp_path_factory.mktemp("big") / "src")
    records = [{"text": (STD / name).read_text(), "path": name, "repo": "std"}
               for name in ("stl_pair.h", "stl_heap.h", "stl_stack.h", "char_traits.h")]
    (src / "std.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    for name in ("stl_vector.h", "vector.tcc", "stl_list.h", "unique_ptr.h"):
        shutil.copy(STD / name, src / "projA" / name)
    return src


def _cli_corpus(src: Path, mode: str, out: Path) -> tuple[bytes, dict]:
    """What a user gets from `nanodata chunk` + `nanodata to-parquet` over the same inputs."""
    docs = out / "docs.jsonl"
    chunk_to_jsonl(docs, inputs=[src / "extra.jsonl", src / "std.jsonl.gz"], project_dirs=[src], mode=mode,
                   max_tokens=PARAMS["max_tokens"])
    manifest = jsonl_to_parquet([str(docs)], out / "parquet", rows_per_file=PARAMS["rows_per_file"],
                                val_fraction=PARAMS["val_fraction"], seed=cpp_corpus.SEED)
    return docs.read_bytes(), _shards(out / "parquet", manifest)


def _shards(directory: Path, manifest: dict) -> dict:
    return {s["name"]: (directory / s["name"]).read_bytes() for s in manifest["shards"] + [manifest["val"]]}


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_corpus_is_identical_for_any_partition_size_and_equal_to_the_cli(source, tmp_path, mode):
    cli_docs, cli_shards = _cli_corpus(source, mode, tmp_path / "cli")
    assert cli_docs.count(b"\n") > 50
    partitions = []
    for partition_mb in PARTITION_MBS:
        dest = str(tmp_path / f"dest-{partition_mb}")
        planned, chunks, merged = run_steps(source, dest, {**PARAMS, "mode": mode}, partition_mb)
        plan = json.loads((Path(planned["stage"]) / "plan.json").read_text())
        partitions.append(plan["partitions"])
        assert (Path(planned["stage"]) / "merged" / "docs.jsonl").read_bytes() == cli_docs, partition_mb
        cpp_corpus.to_parquet(planned["stage"], planned["key"], rows_per_file=PARAMS["rows_per_file"],
                              val_fraction=PARAMS["val_fraction"])
        parquet = Path(planned["stage"]) / "parquet"
        assert _shards(parquet, json.loads((parquet / "manifest.json").read_text())) == cli_shards, partition_mb
        assert len(merged["partitions"]) == plan["partitions"]  # per-partition counts for the report
        assert sum(p["files_read"] for p in merged["partitions"]) == sum(c["files_read"] for c in chunks)
    assert partitions[0] > partitions[1] > partitions[2] == 1
    # the smallest size split every input: the gz input became several decompressed parts
    stage = Path(cpp_corpus.stage_uri(str(tmp_path / "dest-0.002"), planned["key"], 0.002))
    assert len(list((stage / "parts").glob("00001-*.jsonl"))) >= 2


def test_gcs_source_with_compressed_input_builds_the_same_corpus(source, tmp_path, gcs_bucket):
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        storage.write_bytes(f"gs://{gcs_bucket}/src/{path.relative_to(source).as_posix()}", path.read_bytes())
    local, _, _ = run_steps(source, str(tmp_path / "local"), {**PARAMS, "mode": "compilable"}, 0.01)
    remote, _, merged = run_steps(f"gs://{gcs_bucket}/src", f"gs://{gcs_bucket}/dest",
                                  {**PARAMS, "mode": "compilable"}, 0.01)
    assert storage.read_bytes(f"{remote['stage']}/merged/docs.jsonl") == \
        (Path(local["stage"]) / "merged" / "docs.jsonl").read_bytes()
    assert len(merged["partitions"]) > 2


def test_a_folder_of_cpp_files_is_a_source(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    for name in ("stl_pair.h", "stl_heap.h"):
        shutil.copy(STD / name, folder / name)
    planned, chunks, merged = run_steps(folder, str(tmp_path / "dest"), {**PARAMS, "mode": "compilable"})
    assert sum(c["files_read"] for c in chunks) == 2 and merged["docs"] > 2
    sources = {json.loads(line)["source"] for line in
               (Path(planned["stage"]) / "merged" / "docs.jsonl").read_text().splitlines()}
    assert sources == {"loose/stl_pair.h", "loose/stl_heap.h"}


def test_a_source_without_inputs_is_a_clear_error(tmp_path):
    from nanodata.errors import NanodataError

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing to chunk")
    with pytest.raises(NanodataError, match=r"no JSONL inputs \(.jsonl, .jsonl.gz, .jsonl.zst\) and no C\+\+ files"):
        cpp_corpus.plan(str(tmp_path / "empty"), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"})
