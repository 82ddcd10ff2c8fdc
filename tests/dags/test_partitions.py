"""The build steps over partitions: the corpus is the same however it is cut, and equal to one CLI run.

The steps run as the DAG calls them (plan, parse, index, chunk, route, bucket, shard, publish), over a source
holding a .jsonl, a .jsonl.gz and C++ project directories, locally and in the GCS emulator.
"""

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from dag_data import run_steps, run_tail, write_cpp_source

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.jobs import cpp_corpus
from nanodata.pipeline.chunking import chunk_to_jsonl
from nanodata.pipeline.to_parquet import jsonl_to_parquet
from nanodata.report.corpus_report import report_build

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
    # a vendored near-copy (one line in 40 changed) sorted before its original: near-dedup keeps the original
    lines = (STD / "stl_list.h").read_text().splitlines(keepends=True)
    (src / "projA" / "aaa" / "third_party").mkdir(parents=True)
    (src / "projA" / "aaa" / "third_party" / "list.h").write_text(
        "".join(f"// vendored {i}\n" if i % 40 == 7 else line for i, line in enumerate(lines)))
    return src


def _rows(directory: Path, manifest: dict) -> tuple[Counter, Counter]:
    """(train rows, val rows) as multisets of (text, n_tokens, mode, source, kind)."""
    def read(entries):
        return Counter(tuple(r.values()) for e in entries for r in pq.read_table(directory / e["name"]).to_pylist())

    return read(manifest["shards"]), read([manifest["val"]] if manifest["val"] else [])


def _cli_corpus(src: Path, mode: str, out: Path) -> tuple[Counter, Counter]:
    """What a user gets from `nanodata chunk` + `nanodata to-parquet` over the same inputs."""
    docs = out / "docs.jsonl"
    chunk_to_jsonl(docs, inputs=[src / "extra.jsonl", src / "std.jsonl.gz"], project_dirs=[src], mode=mode,
                   max_tokens=PARAMS["max_tokens"])
    manifest = jsonl_to_parquet([str(docs)], out / "parquet", rows_per_file=PARAMS["rows_per_file"],
                                val_fraction=PARAMS["val_fraction"], seed=cpp_corpus.SEED)
    return _rows(out / "parquet", manifest)


def _build_files(dest: str, key: str) -> dict[str, bytes]:
    build = f"{dest}/builds/{key}"
    return {name: storage.read_bytes(f"{build}/{name}") for name in storage.list_names(build)}


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_corpus_is_identical_for_any_partition_size_and_bucket_count_and_equal_to_the_cli(source, tmp_path, mode):
    cli_train, cli_val = _cli_corpus(source, mode, tmp_path / "cli")
    assert sum(cli_train.values()) > 50 and sum(cli_val.values()) > 2
    partitions, builds = [], []
    for partition_mb, buckets in [(mb, None) for mb in PARTITION_MBS] + [(0.04, 5), (0.002, 3)]:
        dest = str(tmp_path / f"dest-{partition_mb}-{buckets}")
        planned, chunks, info = run_steps(source, dest, {**PARAMS, "mode": mode}, partition_mb, buckets)
        plan = json.loads((Path(planned["stage"]) / "plan.json").read_text())
        partitions.append((plan["partitions"], plan["buckets"]))
        builds.append(_build_files(dest, planned["key"]))
        build = Path(dest) / "builds" / planned["key"]
        train, val = _rows(build, json.loads((build / "manifest.json").read_text()))
        assert (train, val) == (cli_train, cli_val), (partition_mb, buckets)  # split included
        assert info["docs"] == sum(cli_train.values()) + sum(cli_val.values())
        assert info["near_files_removed"] == 2  # the vendored list.h and the JSONL copy of projA/util.h
        assert not any(row[3].startswith("projA/aaa/third_party/") for row in train | val)
    assert all(b == builds[0] for b in builds[1:])  # byte-identical shards, manifest included
    assert len([n for n in builds[0] if n.startswith("shard_")]) >= 2
    counts = [p for p, _ in partitions[:3]]
    assert counts[0] > counts[1] > counts[2] == 1
    # a small input is one bucket (MIN_TASK_BYTES a task); 5 and 3 are what larger inputs would get
    assert {b for _, b in partitions[:3]} == {1} and {b for _, b in partitions[3:]} == {5, 3}
    # the smallest size split every input: the gz input became several ranges read through its seek index
    stage = Path(cpp_corpus.stage_uri(str(tmp_path / "dest-0.002-None"), planned["key"], 0.002))
    gz_pieces = [pc for p in (stage / "partitions").glob("*.json") for pc in json.loads(p.read_text())["pieces"]
                 if pc["input"] == 1]
    assert len(gz_pieces) >= 2 and all(pc["gzindex"] for pc in gz_pieces)


def test_a_gzip_input_is_split_with_no_decompressed_copy(source, tmp_path):
    """plan reads the .gz once with rapidgzip (parallel) and stages only its seek index; each chunk task
    seeks to its own decompressed range. No part files, and what plan stages is far smaller than the input."""
    planned = cpp_corpus.plan(str(source), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"}, partition_mb=0.002)
    stage = Path(planned["stage"])
    assert not (stage / "parts").exists() and (stage / "gzindex" / "00001.gzidx").is_file()
    decompressed = len(gzip.decompress((source / "std.jsonl.gz").read_bytes()))
    gz_ranges = sorted((pc["start"], pc["stop"]) for p in (stage / "partitions").glob("*.json")
                       for pc in json.loads(p.read_text())["pieces"] if pc["input"] == 1)
    assert len(gz_ranges) >= 2 and gz_ranges[0][0] == 0 and gz_ranges[-1][1] == decompressed
    assert all(a[1] == b[0] for a, b in zip(gz_ranges, gz_ranges[1:], strict=False))  # contiguous, nothing read twice


def test_a_truncated_gzip_input_takes_the_checked_path(tmp_path):
    """rapidgzip may end a truncated .gz quietly or refuse it; either way plan falls back to gzip, which
    finds the damage: one line naming the input, and no partial corpus planned."""
    src = tmp_path / "src"
    src.mkdir()
    records = "".join(json.dumps({"text": f"int f{i}() {{ return {i}; }}\n" * 50}) + "\n" for i in range(400))
    whole = gzip.compress(records.encode())
    (src / "cut.jsonl.gz").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(NanodataError, match=r"cut.jsonl.gz: cannot decompress: Compressed file ended") as info:
        cpp_corpus.plan(str(src), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"}, partition_mb=256)
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "dest").rglob("plan.json"))


def _zstd_source(source: Path, root: Path, frame_bytes: int | None) -> Path:
    """The source with its .gz input as .zst: frames of frame_bytes decompressed bytes (cut mid-line), or one frame."""
    src = root / "src"
    shutil.copytree(source, src)
    data = gzip.decompress((src / "std.jsonl.gz").read_bytes())
    (src / "std.jsonl.gz").unlink()
    step = frame_bytes or len(data)
    compress = zstandard.ZstdCompressor().compress
    (src / "std.jsonl.zst").write_bytes(b"".join(compress(data[i:i + step]) for i in range(0, len(data), step)))
    return src


def test_a_zstd_input_is_read_from_its_frames_with_no_decompressed_copy(source, tmp_path):
    """zstd frames are independent: plan decompresses the .zst once, noting where frames start; each chunk task
    reads its range from the start of its frame. The corpus is the one the .gz input gives, byte for byte. A
    one-frame .zst (what the zstd CLI writes) falls back to part files after its first piece."""
    params = {**PARAMS, "mode": "basic"}
    _, _, reference = run_steps(source, str(tmp_path / "gz"), params, 0.002)
    for frames, name in ((1500, "frames"), (None, "one")):
        src = _zstd_source(source, tmp_path / name, frames)
        dest = str(tmp_path / name / "dest")
        planned, _, info = run_steps(src, dest, params, 0.002)
        stage = Path(planned["stage"])
        pieces = sorted((pc for p in (stage / "partitions").glob("*.json") for pc in json.loads(p.read_text())["pieces"]
                         if pc["input"] == 1), key=lambda pc: pc["first_line"])
        seeks = [pc for pc in pieces if pc.get("zstd_frame")]
        assert len(pieces) >= 3 and seeks[0] is pieces[0]
        if frames:  # every piece read in place, from a frame at most a partition before it
            assert len(seeks) == len(pieces) and not (stage / "parts").exists()
            assert all(0 <= pc["start"] - pc["zstd_frame"][1] <= 0.002 * 2 ** 20 for pc in pieces)
            assert len({tuple(pc["zstd_frame"]) for pc in pieces}) >= 3
        else:
            assert len(seeks) == 1 and len(list((stage / "parts").iterdir())) == len(pieces) - 1
        assert _build_files(dest, planned["key"]) == _build_files(str(tmp_path / "gz"), reference["key"])
        assert info["docs"] == reference["docs"]


def test_a_zstd_input_in_a_bucket_is_read_from_its_frames_by_ranges(source, tmp_path, gcs_bucket):
    src = _zstd_source(source, tmp_path, 1500)
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        storage.write_bytes(f"gs://{gcs_bucket}/src/{path.relative_to(src).as_posix()}", path.read_bytes())
    params = {**PARAMS, "mode": "basic"}
    local, _, _ = run_steps(src, str(tmp_path / "local"), params, 0.002)
    remote, _, _ = run_steps(f"gs://{gcs_bucket}/src", str(tmp_path / "remote"), params, 0.002)
    assert _build_files(str(tmp_path / "remote"), remote["key"]) == _build_files(str(tmp_path / "local"), local["key"])


def test_a_truncated_zstd_input_is_a_clear_error(source, tmp_path):
    src = _zstd_source(source, tmp_path, 1500)
    data = (src / "std.jsonl.zst").read_bytes()
    (src / "std.jsonl.zst").write_bytes(data[:len(data) // 2])
    with pytest.raises(NanodataError, match=r"std.jsonl.zst: cannot decompress: truncated input"):
        cpp_corpus.plan(str(src), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"}, partition_mb=0.002)


def test_dedupe_keeps_the_first_occurrence_across_buckets(tmp_path):
    """The same texts at many places of several inputs, each input in partitions of its own, several buckets:
    every kept doc names its text's first place in input order, as one `nanodata chunk` run keeps it."""
    src = tmp_path / "src"
    src.mkdir()
    texts = [f"int f{i}() {{ return {i}; }}\n" for i in range(12)]
    first = {}
    for n in range(3):
        lines = []
        for i in ((n * 5 + 7 * k) % 12 for k in range(10)):
            lines.append(json.dumps({"text": texts[i], "path": f"f{i}.cpp", "repo": f"r{n}"}))
            first.setdefault(texts[i], f"r{n}/f{i}.cpp")
        (src / f"in{n}.jsonl").write_text("\n".join(lines) + "\n")
    params = {**PARAMS, "mode": "basic", "val_fraction": 0.0}
    planned, _, info = run_steps(src, str(tmp_path / "dest"), params, partition_mb=1e-6, buckets=5)
    build = tmp_path / "dest" / "builds" / planned["key"]
    rows = [r for p in sorted(build.glob("shard_*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert {r["text"]: r["source"] for r in rows} == first and len(rows) == len(first) == 12
    assert info["duplicates_dropped"] == 30 - 12


def test_a_killed_mapped_task_retried_leaves_no_duplicate_or_lost_doc(source, tmp_path):
    """What a bucket or shard task killed mid-way leaves (some outputs written, no summary, a temp file)
    is replaced whole by its retry: the build equals an uninterrupted one."""
    params = {**PARAMS, "mode": "basic"}
    ref_dest = str(tmp_path / "ref")
    planned, _, _ = run_steps(source, ref_dest, params, 0.04)
    reference = _build_files(ref_dest, planned["key"])

    dest = str(tmp_path / "killed")
    planned = cpp_corpus.plan(str(source), dest, params, partition_mb=0.04)
    chunk_kw = {k: params[k] for k in ("mode", "max_tokens", "tokenizer")}
    chunks = [cpp_corpus.chunk_batch(ref, **chunk_kw) for ref in cpp_corpus.index(planned)]
    run_tail(dest, planned, chunks, params)
    stage, build = Path(planned["stage"]), Path(dest) / "builds" / planned["key"]
    # "kill" bucket 0 and shard 0 after their data, before their summaries; leave half-written leftovers
    (stage / "routed" / "00000.json").unlink()
    (stage / "shards" / "00000.json").unlink()
    shard0 = sorted(build.glob("shard_00000_*.parquet"))[0]
    shard0.write_bytes(shard0.read_bytes()[:100])
    (build / (shard0.name + ".tmp")).write_bytes(b"partial")
    run_tail(dest, planned, chunks, params)  # the retries
    cpp_corpus.publish(dest, planned["stage"], planned["key"])
    assert _build_files(dest, planned["key"]) == reference


def _dest_files(dest: Path) -> dict[str, int]:
    return {p.relative_to(dest).as_posix(): p.stat().st_size for p in dest.rglob("*") if p.is_file()}


def test_staging_is_kept_after_a_failure_and_removed_once_committed(source, tmp_path):
    params = {**PARAMS, "mode": "compilable"}
    dest = tmp_path / "dest"
    planned = cpp_corpus.plan(str(source), str(dest), params, partition_mb=0.04)
    chunk_kw = {k: params[k] for k in ("mode", "max_tokens", "tokenizer")}
    for ref in planned["parse"]:
        cpp_corpus.parse_batch(ref, **chunk_kw)
    cpp_corpus.chunk_batch(cpp_corpus.index(planned)[0], **chunk_kw)
    # the run fails here: its staging stays, and cleanup refuses an uncommitted build
    staged = _dest_files(dest)
    assert any(n.startswith(".staging/") for n in staged)
    with pytest.raises(RuntimeError, match="not committed: its staging is kept"):
        cpp_corpus.cleanup(str(dest), planned["key"])
    assert _dest_files(dest) == staged
    done = Path(planned["stage"]) / "docs" / "00000.json"
    mtime = done.stat().st_mtime_ns

    # the retry resumes (the finished partitions are not redone) and removes the staging once committed
    planned, chunks, _ = run_steps(source, str(dest), params, 0.04)
    assert done.stat().st_mtime_ns == mtime
    report_build(cpp_corpus.build_uri(str(dest), planned["key"]), **cpp_corpus.report_extras(planned["stage"]))
    cpp_corpus.cleanup(str(dest), planned["key"])
    left = _dest_files(dest)
    build = f"builds/{planned['key']}/"
    fidelity = json.loads((dest / build / "report" / "report.json").read_text())["fidelity"]
    assert fidelity["total"]["lines_kept_pct"] == 100.0 and fidelity["total"]["docs"] > 0  # the chunk tasks' figures
    assert "Fidelity to the source" in (dest / build / "report" / "index.html").read_text()
    manifest = json.loads((dest / build / "manifest.json").read_text())
    kept = {build + s["name"] for s in manifest["shards"] + [manifest["val"]]} | \
        {build + "manifest.json", build + "_COMPLETE", "latest.json"}
    other = {n: size for n, size in left.items() if n not in kept and not n.startswith(build + "report/")}
    assert not other and not (dest / ".staging").exists(), other


def test_gcs_source_with_compressed_input_builds_the_same_corpus(source, tmp_path, gcs_bucket):
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        storage.write_bytes(f"gs://{gcs_bucket}/src/{path.relative_to(source).as_posix()}", path.read_bytes())
    local, _, _ = run_steps(source, str(tmp_path / "local"), {**PARAMS, "mode": "compilable"}, 0.01)
    remote, chunks, _ = run_steps(f"gs://{gcs_bucket}/src", f"gs://{gcs_bucket}/dest",
                                  {**PARAMS, "mode": "compilable"}, 0.01)
    assert _build_files(f"gs://{gcs_bucket}/dest", remote["key"]) == _build_files(str(tmp_path / "local"), local["key"])
    assert sum(c["partitions"] for c in chunks) > 2
    # staging under the bucket goes too, once committed, and so does this machine's cached copy of the index
    cache = cpp_corpus._index_cache(f"{remote['stage']}/index/index.sqlite")
    assert cache.is_dir()
    cpp_corpus.cleanup(f"gs://{gcs_bucket}/dest", remote["key"])
    assert storage.list_names(f"gs://{gcs_bucket}/dest/.staging") == [] and not cache.exists()


def test_a_folder_of_cpp_files_is_a_source(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    for name in ("stl_pair.h", "stl_heap.h"):
        shutil.copy(STD / name, folder / name)
    planned, chunks, info = run_steps(folder, str(tmp_path / "dest"), {**PARAMS, "mode": "compilable"})
    assert sum(c["files_read"] for c in chunks) == 2 and info["docs"] > 2
    build = tmp_path / "dest" / "builds" / planned["key"]
    sources = {r["source"] for p in build.glob("*.parquet") for r in pq.read_table(p).to_pylist()}
    assert sources == {"loose/stl_pair.h", "loose/stl_heap.h"}


def test_partitions_stay_within_twice_the_size_except_a_single_bigger_file(tmp_path):
    """Files of mixed sizes around the partition size: a partition passes 2x partition_mb only when it is one
    file bigger than that, and every file lands in exactly one partition."""
    src = tmp_path / "src"
    sizes = [300, 5000, 700, 12000, 100, 100, 2500, 40000, 900, 3100, 800, 9000]
    for i, size in enumerate(sizes):
        (src / f"p{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"p{i % 3}" / f"f{i:02d}.cpp").write_text(("int x;\n" * size)[:size])
    limit = 4000
    planned = cpp_corpus.plan(str(src), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"},
                              partition_mb=limit / 2 ** 20)
    parts = [json.loads(p.read_text()) for p in sorted((Path(planned["stage"]) / "partitions").glob("*.json"))]
    files = [f for p in parts for pc in p["pieces"] for f in pc["files"]]
    assert sorted(f[1] for f in files) == sorted(sizes) and len(parts) >= 6
    for p in parts:
        in_it = [f for pc in p["pieces"] for f in pc["files"]]
        assert p["bytes"] <= 2 * limit or (len(in_it) == 1 and in_it[0][1] > limit), p


def test_a_source_without_inputs_is_a_clear_error(tmp_path):
    from nanodata.errors import NanodataError

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("nothing to chunk")
    with pytest.raises(NanodataError, match=r"no JSONL inputs \(.jsonl, .jsonl.gz, .jsonl.zst\) and no C\+\+ files"):
        cpp_corpus.plan(str(tmp_path / "empty"), str(tmp_path / "dest"), {**PARAMS, "mode": "basic"})


@pytest.mark.parametrize("mode", ["basic", "compilable"])
def test_a_max_file_bytes_param_names_each_skipped_file_in_the_report(tmp_path, mode):
    """No limit by default (every file chunked, the report has no such section); a limit skips the bigger files,
    which the report names with their sizes, as `nanodata chunk --max-file-bytes` does."""
    folder = tmp_path / "loose"
    folder.mkdir()
    for name in ("stl_pair.h", "stl_heap.h"):
        shutil.copy(STD / name, folder / name)
    sizes = {name: (folder / name).stat().st_size for name in ("stl_pair.h", "stl_heap.h")}
    limit = min(sizes.values())
    big = max(sizes, key=sizes.get)
    for params, read in (({**PARAMS, "mode": mode}, 2), ({**PARAMS, "mode": mode, "max_file_bytes": limit}, 1)):
        dest = tmp_path / f"dest-{read}"
        planned, chunks, info = run_steps(folder, str(dest), params)
        assert sum(c["files_read"] for c in chunks) == read and info["docs"] > 1
        extras = cpp_corpus.report_extras(planned["stage"])
        report = json.loads(Path(report_build(info["uri"], **extras)).with_name("report.json").read_text())
        assert (report["too_big"] is None) == (read == 2)
    assert extras["too_big"] == report["too_big"] == {
        "max_file_bytes": limit, "files": 1, "listed": [{"file": str(folder / big), "bytes": sizes[big]}]}
