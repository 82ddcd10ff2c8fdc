"""The DAG steps as plain functions (no Airflow): batching bounds, a local-path destination, idempotence."""

import json

from dag_data import write_cpp_source

from nanodata.jobs import MAX_MAPPED_TASKS, cpp_corpus
from nanodata.jobs.inputs import batch_bounds, list_inputs

PARAMS = {"mode": "basic", "max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 4, "val_fraction": 0.2}


def test_batches_cover_every_item_once_and_never_exceed_the_map_limit():
    for n in (1, 7, 1024, 1025, 5000):
        bounds = batch_bounds(n, MAX_MAPPED_TASKS)
        assert len(bounds) == min(n, MAX_MAPPED_TASKS)
        assert [i for a, b in bounds for i in range(a, b)] == list(range(n))
        assert max(b - a for a, b in bounds) - min(b - a for a, b in bounds) <= 1


def test_plan_maps_at_most_1024_tasks_for_many_inputs(tmp_path):
    src = tmp_path / "many"
    src.mkdir()
    for i in range(1500):
        (src / f"part_{i:04d}.jsonl").write_text(json.dumps({"text": f"int f{i}() {{ return {i}; }}\n"}) + "\n")
    refs = cpp_corpus.plan(str(src), str(tmp_path / "dest"), PARAMS)
    assert len(refs) == MAX_MAPPED_TASKS and [r["batch"] for r in refs] == list(range(MAX_MAPPED_TASKS))
    listing = json.loads((tmp_path / "dest" / ".staging" / refs[0]["key"] / "inputs.json").read_text())
    assert sum(b - a for a, b in listing["batches"]) == 1500 == len(listing["inputs"])


def test_project_mode_chunks_the_whole_source_in_one_batch(tmp_path):
    src = write_cpp_source(tmp_path / "src")
    assert len(cpp_corpus.plan(str(src), str(tmp_path / "dest"), {**PARAMS, "mode": "project"})) == 1


def test_steps_build_into_a_local_destination_and_rerun_as_no_ops(tmp_path):
    src, dest = write_cpp_source(tmp_path / "src"), str(tmp_path / "dest")
    refs = cpp_corpus.plan(str(src), dest, PARAMS)
    key = refs[0]["key"]
    chunks = [cpp_corpus.chunk_batch(dest, key, r["batch"], mode="basic", max_tokens=256, tokenizer="cl100k_base")
              for r in refs]
    merged = cpp_corpus.merge(dest, key)
    assert merged["docs"] + merged["duplicates_dropped"] == sum(c["docs"] for c in chunks)
    cpp_corpus.to_parquet(dest, key, rows_per_file=4, val_fraction=0.2)
    assert cpp_corpus.upload(dest, key)["uploaded"] >= 4
    info = cpp_corpus.publish(dest, key)
    report = cpp_corpus.report(dest, key)
    build = tmp_path / "dest" / "builds" / key
    assert (build / "_COMPLETE").is_file() and report == str(build / "report" / "index.html")
    assert json.loads((tmp_path / "dest" / "latest.json").read_text())["key"] == key == info["key"]

    # every step again: each finds its output and does nothing
    mtimes = {p: p.stat().st_mtime_ns for p in (tmp_path / "dest").rglob("*") if p.is_file()}
    assert cpp_corpus.chunk_batch(dest, key, 0, mode="basic", max_tokens=256, tokenizer="cl100k_base") == chunks[0]
    assert cpp_corpus.merge(dest, key) == merged
    assert cpp_corpus.upload(dest, key)["uploaded"] == 0
    assert cpp_corpus.publish(dest, key) == info and cpp_corpus.report(dest, key) == report
    assert cpp_corpus.plan(str(src), dest, PARAMS) == []
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "dest").rglob("*") if p.is_file()} == mtimes
    assert [i["name"] for i in list_inputs(str(src))] == ["extra.jsonl", "projA/", "projB/"]
