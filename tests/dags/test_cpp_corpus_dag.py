"""nanodata_cpp_corpus end to end with dag.test() against the GCS emulator: real chunking, parquet, uploads."""

import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest
from dag_data import asset_events, bucket_snapshot, task_states, write_cpp_source, xcom_sizes

from nanodata import storage
from nanodata.jobs.inputs import build_key, list_inputs

PARAMS = {"mode": "basic", "max_tokens": 256, "tokenizer": "cl100k_base", "rows_per_file": 3, "val_fraction": 0.2}


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags["nanodata_cpp_corpus"]


@pytest.fixture(scope="module")
def bucket(gcs_emulator):
    return gcs_emulator.create_bucket("dags-cpp-corpus")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_cpp_source(tmp_path_factory.mktemp("cpp") / "src")


PARTITION_MB = 0.001  # ~1 KB partitions: the small source still spreads over several mapped tasks


def conf(src, dest, **overrides):
    return {"source": str(src), "destination": dest, **PARAMS, "partition_mb": PARTITION_MB, **overrides}


def read_json(uri):
    return json.loads(storage.read_bytes(uri))


@pytest.fixture(scope="module")
def built(dag, bucket, source):
    """The reference build: every later test compares against it."""
    dest = f"gs://{bucket}/main"
    dag_run = dag.test(run_conf=conf(source, dest))
    return dag_run, dest, build_key(list_inputs(str(source)), PARAMS)


def test_build_uploads_shards_manifest_complete_and_latest(built, bucket):
    dag_run, dest, key = built
    assert dag_run.state == "success"
    states = task_states(dag_run)
    assert len(states["chunk"]) >= 2 and set(states["chunk"]) == {"success"}  # one mapped task per partition
    assert states["parse"] == ["skipped"]  # basic mode: nothing to index
    assert all(s == ["success"] for t, s in states.items() if t not in ("chunk", "parse"))
    objects = bucket_snapshot(bucket)
    build = f"main/builds/{key}/"
    manifest = read_json(f"{dest}/builds/{key}/manifest.json")
    files = [s["name"] for s in manifest["shards"]] + [manifest["val"]["name"]]
    for shard in manifest["shards"] + [manifest["val"]]:
        assert objects[build + shard["name"]][1] == shard["crc32c"]  # what GCS stores is what the manifest says
    assert {n[len(build):] for n in objects if n.startswith(build) and "/" not in n[len(build):]} == \
        set(files) | {"manifest.json", "_COMPLETE"}
    assert len(manifest["shards"]) >= 2 and manifest["total_rows"] >= 8
    latest = read_json(f"{dest}/latest.json")
    assert latest["key"] == key and latest["uri"] == f"{dest}/builds/{key}" and latest["docs"] == manifest["total_rows"]
    assert latest["duplicates_dropped"] >= 1  # extra.jsonl repeats projA/util.h
    report = read_json(f"{dest}/builds/{key}/report/report.json")
    assert len(report["partitions"]) == len(task_states(dag_run)["chunk"])  # one row per partition (one task each)
    assert sum(p["files_read"] for p in report["partitions"]) == 7
    assert "<h2>Partitions</h2>" in storage.read_bytes(f"{dest}/builds/{key}/report/index.html").decode()


def test_build_docs_come_from_every_input(built, tmp_path):
    _, dest, key = built
    local = tmp_path / "build"
    storage.sync(f"{dest}/builds/{key}", str(local))
    import pyarrow.parquet as pq

    rows = [r for p in sorted(local.glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    texts = "\n".join(r["text"] for r in rows)
    assert "step_11" in texts and "std::sqrt" in texts and "twice" in texts
    assert len({r["text"] for r in rows}) == len(rows)  # deduplicated across batches
    assert len(rows) == read_json(f"{dest}/latest.json")["docs"]


def test_asset_event_carries_uri_and_counts(built):
    _, dest, key = built
    event = asset_events("nanodata_cpp_corpus")[-1]
    assert event["uri"] == f"{dest}/builds/{key}" and event["key"] == key
    assert event["docs"] == read_json(f"{dest}/latest.json")["docs"] and event["shards"] >= 3 and event["tokens"] > 0


def test_asset_event_queues_a_tokenizer_run(built):
    """The scheduler turns these queue rows into a nanodata_tokenizer run (schedule=[the corpus Asset])."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session

    with create_session() as session:
        queued = session.query(AssetDagRunQueue).filter(AssetDagRunQueue.target_dag_id == "nanodata_tokenizer").count()
    assert queued == 1


def test_xcom_holds_only_small_values(built):
    sizes = xcom_sizes(built[0])
    assert sizes and max(sizes.values()) < 1024, sizes


def test_unchanged_rerun_chunks_and_uploads_nothing(dag, built, bucket, source):
    _, dest, _ = built
    before, n_events = bucket_snapshot(bucket), len(asset_events("nanodata_cpp_corpus"))
    dag_run = dag.test(run_conf=conf(source, dest))
    assert dag_run.state == "success"
    states = task_states(dag_run)
    assert states["plan"] == ["success"] and states["chunk"] == ["skipped"] and states["upload"] == ["skipped"]
    assert bucket_snapshot(bucket) == before  # not one object written, not even latest.json
    assert len(asset_events("nanodata_cpp_corpus")) == n_events


def test_changed_input_rebuilds_under_a_new_key(dag, built, bucket, source, tmp_path):
    _, dest, old_key = built
    moved = shutil.copytree(source, tmp_path / "elsewhere")
    before = bucket_snapshot(bucket)
    assert dag.test(run_conf=conf(moved, dest)).state == "success"  # same contents elsewhere: same key
    assert bucket_snapshot(bucket) == before
    (moved / "projB" / "math" / "vec.cpp").write_text("double length2(double x) { return x * x; }\n")
    dag_run = dag.test(run_conf=conf(moved, dest))
    assert dag_run.state == "success"
    latest = read_json(f"{dest}/latest.json")
    assert latest["key"] != old_key and storage.exists(f"{dest}/builds/{latest['key']}/_COMPLETE")
    assert storage.exists(f"{dest}/builds/{old_key}/_COMPLETE")  # the previous build stays usable
    assert asset_events("nanodata_cpp_corpus")[-1]["key"] == latest["key"]


@pytest.mark.parametrize("bad", [{"mode": "fancy"}, {"max_tokens": 8}, {"val_fraction": 0.9},
                                 {"destination": "s3://bucket/x"}, {"source": "relative/path"},
                                 {"rows_per_file": "many"}])
def test_invalid_params_are_rejected(dag, bucket, source, bad):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dag.test(run_conf=conf(source, f"gs://{bucket}/never", **bad))
    assert not storage.list_names(f"gs://{bucket}/never")


def _manifest_digests(dest, key):
    manifest = read_json(f"{dest}/builds/{key}/manifest.json")
    return [(s["name"], s["sha256"]) for s in manifest["shards"] + [manifest["val"]]]


def test_upload_crash_then_retry_leaves_the_same_complete_build(dag, built, bucket, source, monkeypatch):
    """The first upload attempt dies after one shard; Airflow's retry finishes the build."""
    _, ref_dest, key = built
    dest = f"gs://{bucket}/retry"
    real_sync, calls = storage.sync, []

    def crashing_sync(src, dst, **kw):
        calls.append(dst)
        if dst.endswith(f"/builds/{key}") and len(calls) and sum(d == dst for d in calls) == 1:
            partial = dst + "/shard_00000.parquet"
            storage.write_bytes(partial, open(f"{src}/shard_00000.parquet", "rb").read())
            raise ConnectionError("connection reset mid-upload")
        return real_sync(src, dst, **kw)

    monkeypatch.setattr(storage, "sync", crashing_sync)
    monkeypatch.setattr(dag.get_task("upload"), "retry_delay", timedelta(0))
    monkeypatch.setattr(dag.get_task("upload"), "retry_exponential_backoff", 0)
    dag_run = dag.test(run_conf=conf(source, dest))
    assert dag_run.state == "success"
    assert sum(d.endswith(f"/builds/{key}") for d in calls) == 2  # one crash, one retry
    assert _manifest_digests(dest, key) == _manifest_digests(ref_dest, key)
    assert read_json(f"{dest}/latest.json")["key"] == key


def test_chunk_failure_then_clear_resumes_and_completes(dag, built, bucket, source, monkeypatch):
    """A chunk task fails for good; the run fails with nothing published. Clearing the run redoes only
    the failed batch and leaves the same build as an uninterrupted run."""
    from nanodata.chunking import partitions

    _, ref_dest, key = built
    dest = f"gs://{bucket}/clear"
    real_items, chunked, failing = partitions.partition_items, [], []

    def flaky_items(partition, max_file_bytes):
        chunked.append(partition["partition"])
        files = [f[0] for piece in partition["pieces"] if piece["kind"] == "tree" for f in piece["files"]]
        if any(f.startswith("projB/") for f in files) and fail:
            failing.append(partition["partition"])
            raise MemoryError("worker killed")
        return real_items(partition, max_file_bytes)

    fail = True
    monkeypatch.setattr(partitions, "partition_items", flaky_items)
    monkeypatch.setattr(dag.get_task("chunk"), "retries", 0)
    when = datetime(2026, 3, 1, tzinfo=timezone.utc)
    failed = dag.test(run_conf=conf(source, dest), logical_date=when, run_after=when)
    assert failed.state == "failed"
    states = task_states(failed)
    assert states["chunk"].count("failed") == 1 and len(states["chunk"]) >= 2 and states["merge"] == ["upstream_failed"]
    assert not storage.exists(f"{dest}/builds/{key}/_COMPLETE") and not storage.exists(f"{dest}/latest.json")

    fail, chunked[:] = False, []
    rerun = dag.test(run_conf=conf(source, dest), logical_date=when, run_after=when)  # the same run, cleared
    assert rerun.run_id == failed.run_id and rerun.state == "success"
    assert len(failing) == 1 and chunked == failing  # finished partitions were not chunked again
    assert _manifest_digests(dest, key) == _manifest_digests(ref_dest, key)
    assert read_json(f"{dest}/latest.json")["docs"] == read_json(f"{ref_dest}/latest.json")["docs"]
