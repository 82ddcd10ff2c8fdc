"""The DAG steps as plain functions (no Airflow): batching bounds, a local-path destination, idempotence."""

import json
import re
from pathlib import Path

import pytest
from dag_data import run_steps, run_tail, write_cpp_source

from nanodata.errors import NanodataError
from nanodata.jobs import MAX_MAPPED_TASKS, cpp_corpus
from nanodata.jobs.inputs import batch_bounds, list_inputs
from nanodata.report import build_stats
from nanodata.report.corpus_report import report_build
from nanodata.report.figures import build_report

PARAMS = {"mode": "basic", "max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 4, "val_fraction": 0.2}


def test_batches_cover_every_item_once_and_never_exceed_the_map_limit():
    for n in (1, 7, 1024, 1025, 5000):
        bounds = batch_bounds(n, MAX_MAPPED_TASKS)
        assert len(bounds) == min(n, MAX_MAPPED_TASKS)
        assert [i for a, b in bounds for i in range(a, b)] == list(range(n))
        assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


def test_plan_maps_at_most_1024_tasks_for_many_partitions(tmp_path):
    src = tmp_path / "many"
    src.mkdir()
    for i in range(1500):
        (src / f"part_{i:04d}.jsonl").write_text(json.dumps({"text": f"int f{i}() {{ return {i}; }}\n"}) + "\n")
    planned = cpp_corpus.plan(str(src), str(tmp_path / "dest"), PARAMS, partition_mb=1e-6)  # a partition per input
    refs = planned["chunk"]
    assert len(refs) == MAX_MAPPED_TASKS and [r["batch"] for r in refs] == list(range(MAX_MAPPED_TASKS))
    assert planned["parse"] == []  # basic mode: nothing to index
    listing = json.loads((Path(planned["stage"]) / "plan.json").read_text())
    assert listing["partitions"] == 1500 == sum(b - a for a, b in listing["batches"]) == len(listing["inputs"])


def test_global_modes_parse_every_partition_first(tmp_path):
    src = write_cpp_source(tmp_path / "src")
    planned = cpp_corpus.plan(str(src), str(tmp_path / "dest"), {**PARAMS, "mode": "project"}, partition_mb=0.001)
    assert len(planned["parse"]) == len(planned["chunk"]) >= 2


def test_steps_build_into_a_local_destination_and_rerun_as_no_ops(tmp_path):
    src, dest = write_cpp_source(tmp_path / "src"), str(tmp_path / "dest")
    planned, chunks, info = run_steps(src, dest, PARAMS)
    key, stage = planned["key"], planned["stage"]
    # the JSONL copy of projA/util.h is a near-copy (Jaccard 1): its doc goes before exact dedupe sees it
    assert info["docs"] + info["duplicates_dropped"] + info["near_docs_removed"] == sum(c["docs"] for c in chunks)
    assert info["near_files_removed"] == info["near_docs_removed"] == 1 and info["duplicates_dropped"] == 0
    report = report_build(info["uri"])
    build = tmp_path / "dest" / "builds" / key
    assert (build / "_COMPLETE").is_file() and report == str(build / "report" / "index.html")
    assert json.loads((tmp_path / "dest" / "latest.json").read_text())["key"] == key == info["key"]

    # every step again: each finds its output and does nothing
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "dest").rglob("*") if p.is_file()}
    ref = planned["chunk"][0]
    assert cpp_corpus.chunk_batch(ref, mode="basic", max_tokens=256, tokenizer="cl100k_base") == chunks[0]
    assert run_tail(dest, planned, PARAMS) == run_tail(dest, planned, PARAMS)
    assert cpp_corpus.publish(dest, stage, key) == info and report_build(info["uri"]) == report
    assert cpp_corpus.plan(str(src), dest, PARAMS) == {"key": key, "stage": stage, "parse": [], "chunk": [], "near": []}
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "dest").rglob("*") if p.is_file()} == mtimes
    assert [(i["name"], i["kind"]) for i in list_inputs(str(src))] == [("extra.jsonl", "jsonl"), ("src/", "tree")]


def test_mapped_tail_tasks_hold_a_minimum_of_data():
    """Buckets follow the partitions down to BUCKET_TASK_BYTES of input each; shard tasks write MIN_TASK_BYTES of docs
    each at least, however small rows_per_file makes the files (the deployment test's tiny build is one task of
    each)."""
    from nanodata.jobs.tail import BUCKET_TASK_BYTES, MIN_TASK_BYTES, bucket_count, shard_tasks

    mb = 2 ** 20
    assert bucket_count(200 * mb, 10 * mb) == 1  # 200 MB at partition_mb 10: one bucket task, not 20 idle ones
    assert bucket_count(1000 * mb, 40 * mb) == 2  # a 1 GB crawl at partition_mb 40: 2 tasks, not 25
    assert bucket_count(20_000, 1) == 1 and bucket_count(3 * BUCKET_TASK_BYTES, 1) == 3
    assert bucket_count(3 * BUCKET_TASK_BYTES, 2 * BUCKET_TASK_BYTES) == 2  # big partitions: one bucket each
    assert bucket_count(10 ** 12, mb) == MAX_MAPPED_TASKS
    assert shard_tasks(500, 40_000) == 1 and shard_tasks(3, 200 * mb) == 4
    assert shard_tasks(100, 200 * mb) == 25 == -(-200 * mb // MIN_TASK_BYTES)


def test_report_merges_the_shard_tasks_statistics_into_the_report_reading_the_shards_gives(tmp_path):
    """The report step reads no shard: the shard tasks counted each file they wrote; merged, their counts give the
    report that reading every shard gives (several files per shard, val included)."""
    src, dest = write_cpp_source(tmp_path / "src"), str(tmp_path / "dest")
    planned, _, info = run_steps(src, dest, {**PARAMS, "rows_per_file": 2})
    extras = build_stats.report_extras(planned["stage"])
    assert len(extras["shards"]) == info["shards"] >= 3 and extras["ambiguity"] is None  # basic: no index
    merged = build_report(info["uri"], max_tokens=256, **extras)
    assert merged == build_report(info["uri"], max_tokens=256, **{**extras, "shards": None})
    assert merged["docs"] == info["docs"] and merged["tokens"] == info["tokens"]


def test_report_shows_the_names_ambiguous_within_each_project(tmp_path):
    """Global modes: the index's per-project counts of names defined twice with one qualification flow into the
    run's report, as a table."""
    src = write_cpp_source(tmp_path / "src")
    (src / "projB" / "again.cpp").write_text("double length(const Vec& v) { return v.x; }\n")
    dest = str(tmp_path / "dest")
    planned, _, info = run_steps(src, dest, {**PARAMS, "mode": "project"})
    index = Path(report_build(info["uri"], max_tokens=256, **build_stats.report_extras(planned["stage"])))
    ambiguity = json.loads((index.parent / "report.json").read_text())["ambiguity"]
    assert ambiguity == {"ambiguous_names": 1, "ambiguous_by_project": {"projB": 1}}
    assert "<h2>Ambiguous names by project</h2>" in index.read_text() and "<td>projB</td><td>1</td>" in index.read_text()


@pytest.mark.parametrize("bad, words", [
    ({"filters": "genrated"}, "--filters 'genrated': unknown filter"),
    ({"redact": "pii"}, "--redact 'pii': unknown kind"),
    ({"licenses": "MITT"}, "not SPDX license ids: 'MITT'"),
    ({"decontaminate": ["bench.jsonl"]}, "decontaminate 'bench.jsonl': not an absolute path"),
    ({"decontaminate": ["/nowhere/bench.jsonl"]}, "/nowhere/bench.jsonl"),
])
def test_plan_refuses_bad_cleaning_params_in_one_line_before_any_work(tmp_path, bad, words):
    src, dest = write_cpp_source(tmp_path / "src"), tmp_path / "dest"
    with pytest.raises(NanodataError, match=re.escape(words)):
        cpp_corpus.plan(str(src), str(dest), {**PARAMS, **bad})
    assert not dest.exists()


def test_a_benchmark_file_is_part_of_the_build_key(tmp_path):
    src, dest = write_cpp_source(tmp_path / "src"), str(tmp_path / "dest")
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"task_id": "T/0", "text": "int completely_unrelated_function_name(int a, int b) { return a; }"}\n')
    first = cpp_corpus.plan(str(src), dest, {**PARAMS, "decontaminate": [str(bench)]})["key"]
    bench.write_text('{"task_id": "T/0", "text": "int another_completely_unrelated_function(int a, int b) { return b; }"}\n')
    assert cpp_corpus.plan(str(src), dest, {**PARAMS, "decontaminate": [str(bench)]})["key"] != first


def test_shard_bounds_hold_the_params_and_cover_every_slot_once():
    """S is as few shards as hold the docs under rows_per_file and the size cap each on average; each shard a run of
    consecutive slots with about 1/S of the docs."""
    import numpy as np

    from nanodata.jobs.tail import VSHARDS, shard_bounds

    rng = np.random.default_rng(0)
    docs = rng.poisson(50, VSHARDS)
    size = docs * 1000
    for rows, cap, want in ((10 ** 9, 10 ** 12, 1), (int(docs.sum()) // 7 - 1, 10 ** 12, 8), (10 ** 9, int(size.sum()) // 3, 4)):
        bounds = shard_bounds(docs, size, rows, cap)
        assert len(bounds) - 1 == want and bounds[0] == 0 and bounds[-1] == VSHARDS
        assert all(a <= b for a, b in zip(bounds, bounds[1:], strict=False))
        held = [int(docs[a:b].sum()) for a, b in zip(bounds, bounds[1:], strict=False)]
        assert sum(held) == docs.sum() and max(held) - min(held) <= 2 * docs.max()
    assert shard_bounds(np.zeros(VSHARDS, int), np.zeros(VSHARDS, int), 4, 1 << 20) == [0, VSHARDS]


def test_shards_are_sized_from_the_docs_that_survive_deduplication(tmp_path):
    """A source of mostly copies: the shards hold what the Params ask for after the copies are gone (rows_per_file
    docs each), not the count before deduplication; a small size cap makes more shards."""
    src = tmp_path / "src"
    src.mkdir()
    unique = [f"int unique_{i}(int x) {{ return x * {i} + {i * 7}; }}\n" for i in range(30)]
    copies = [unique[i % 3] for i in range(300)]
    (src / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in unique + copies))
    params = {**PARAMS, "rows_per_file": 10, "val_fraction": 0.0, "dedup": "exact"}
    planned, chunks, info = run_steps(src, str(tmp_path / "dest"), params)
    assert sum(c["docs"] for c in chunks) == 330 and info["docs"] == 30
    plan = json.loads((Path(planned["stage"]) / "shard_plan.json").read_text())
    assert plan["docs"] == 30 and plan["shards"] == 3  # 30 / 10, where the docs before dedupe would make 33
    capped, _, info = run_steps(src, str(tmp_path / "dest2"), {**params, "rows_per_file": 1000, "shard_mb": 0.0005})
    assert json.loads((Path(capped["stage"]) / "shard_plan.json").read_text())["shards"] > 1  # 524 bytes a shard
    assert info["docs"] == 30
