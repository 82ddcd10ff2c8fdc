"""nanodata_cpp_corpus end to end with dag.test() against the GCS emulator: real chunking, parquet, uploads."""

import json
import shutil
from datetime import datetime, timedelta, timezone

import pytest
from airflow_test_home import REPO
from dag_data import asset_events, bucket_snapshot, task_states, write_cpp_source, xcom_sizes

from nanodata import corpus, storage
from nanodata.jobs.cpp_corpus import build_params
from nanodata.jobs.inputs import build_key, list_inputs

PARAMS = {"mode": "basic", "max_tokens": 256, "tokenizer": "cl100k_base", "max_file_bytes": None, "rows_per_file": 3,
          "shard_mb": 512, "val_fraction": 0.4, "dedup": "near", "near_threshold": 0.7, "filters": "generated,long-lines,alpha,encoded",
          "redact": "secrets,emails,ips", "decontaminate": None, "licenses": None}


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
    """The reference build: every later test compares against it. Its tail is mapped over several tasks even for
    this small source (tasks of MIN_TASK_BYTES and BUCKET_TASK_BYTES); the later builds use the default, one task each: same corpus."""
    from nanodata.jobs import tail

    dest = f"gs://{bucket}/main"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tail, "MIN_TASK_BYTES", 1)
        patch.setattr(tail, "BUCKET_TASK_BYTES", 1)
        dag_run = dag.test(run_conf=conf(source, dest))
    return dag_run, dest, build_key(list_inputs(str(source)), build_params(PARAMS))


def test_build_uploads_shards_manifest_complete_and_latest(built, bucket):
    dag_run, dest, key = built
    assert dag_run.state == "success"
    states = task_states(dag_run)
    assert len(states["chunk"]) >= 2 and set(states["chunk"]) == {"success"}  # one mapped task per partition
    assert states["parse"] == ["skipped"]  # basic mode: nothing to index
    assert len(states["bucket"]) >= 2 and set(states["bucket"]) == {"success"}  # the tail is mapped too
    assert len(states["shard"]) >= 2 and set(states["shard"]) == {"success"}
    assert all(s == ["success"] for t, s in states.items() if t not in ("chunk", "parse", "bucket", "shard"))
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
    assert latest["near_files_removed"] == 1  # extra.jsonl repeats projA/util.h: a near-copy (Jaccard 1)
    report = read_json(f"{dest}/builds/{key}/report/report.json")
    assert len(report["partitions"]) == len(task_states(dag_run)["chunk"])  # one row per partition (one task each)
    assert sum(p["files_read"] for p in report["partitions"]) == 7
    assert "<h2>Partitions</h2>" in storage.read_bytes(f"{dest}/builds/{key}/report/index.html").decode()
    assert not any(n.startswith("main/.staging/") for n in objects)  # committed: staging deleted


def test_report_from_the_shard_tasks_counts_equals_reading_the_shards(built, tmp_path):
    """The report task read no shard (the shard tasks counted them): its figures are those of reading them."""
    from nanodata.report.figures import build_report

    _, dest, key = built
    uri = f"{dest}/builds/{key}"
    dag_report = read_json(f"{uri}/report/report.json")
    read = build_report(corpus.fetch_dir(uri, tmp_path / "copy"), max_tokens=PARAMS["max_tokens"], uri=uri)
    from_tasks = ("partitions", "tasks", "buckets", "ambiguity", "fidelity", "near_duplicates", "cleaning", "reuse")
    shard_figures = [k for k in read if k not in from_tasks]
    assert {k: dag_report[k] for k in shard_figures} == {k: read[k] for k in shard_figures}
    assert dag_report["fidelity"]["total"]["lines_kept_pct"] == 100.0  # counted by the chunk tasks
    near = dag_report["near_duplicates"]  # settled by its task, shown in the report
    assert near["files_removed"] == near["docs_removed"] == 1 and near["examples"][0]["kept"] == "dup/util.h"
    page = storage.read_bytes(f"{uri}/report/index.html").decode()
    assert "Near-duplicate files" in page and "<h2>Cleaning</h2>" in page
    cleaning = dag_report["cleaning"]  # summed over the chunk tasks: every project, its license, nothing dropped
    assert set(cleaning["projects"]) == {"projA", "projB", "dup", "misc"} and cleaning["files_dropped"] == 0
    assert {e["license"] for e in cleaning["projects"].values()} == {"NOASSERTION"}


def test_build_docs_come_from_every_input(built, tmp_path):
    _, dest, key = built
    local = tmp_path / "build"
    corpus.sync(f"{dest}/builds/{key}", str(local))
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
    assert states["plan"] == ["success"] and states["chunk"] == ["skipped"] and states["publish"] == ["skipped"]
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


@pytest.mark.parametrize("bad", [{"mode": "fancy"}, {"max_tokens": 15}, {"val_fraction": 0.9}, {"partition_mb": 0},
                                 {"rows_per_file": "many"}, {"dedup": "fuzzy"}, {"near_threshold": 0.3},
                                 {"near_threshold": 1.5}])
def test_invalid_params_are_rejected(dag, bucket, source, bad):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dag.test(run_conf=conf(source, f"gs://{bucket}/never", **bad))
    assert not storage.list_names(f"gs://{bucket}/never")


def test_max_tokens_minimum_is_the_chunkers(dag):
    """One minimum: the form's (which the UI's number field raises a smaller value to) is `nanodata chunk`'s."""
    from nanodata.ranges import MIN_TOKENS

    param = dag.params.get_param("max_tokens")
    assert param.schema["minimum"] == MIN_TOKENS and f">= {MIN_TOKENS} " in param.description


def test_uri_mistakes_fail_the_first_task_in_words(dag, bucket, source, capfd):
    """No regex in the form or the error: the Param says the rule in words, the run's first task checks it and
    fails at once (no retry) with one line naming the Param."""
    for name in ("source", "destination"):
        schema = dag.params.get_param(name).schema
        assert "pattern" not in schema and "bucket names are lowercase letters, digits, dots, dashes and " \
            "underscores" in dag.params.get_param(name).description
    dag_run = dag.test(run_conf=conf("relative/path", f"gs://{bucket}/never"))
    assert dag_run.state == "failed"
    states = task_states(dag_run)
    assert states["plan"] == ["failed"] and states["index"] == ["upstream_failed"]
    out = capfd.readouterr().out
    assert "NanodataError: source 'relative/path': not an absolute path or gs://bucket/prefix" in out
    assert "does not match" not in out and "action=fail" in out  # the retry policy: bad input fails at once
    assert not storage.list_names(f"gs://{bucket}/never")


@pytest.mark.parametrize("uri, expected", [
    ("gs://Nanodata-Demo/cpp", "destination: 'gs://Nanodata-Demo/cpp': invalid bucket name 'Nanodata-Demo': GCS "
                               "bucket names are 3-63 characters of lowercase letters, digits"),
    ("s3://bucket/x", "destination 's3://bucket/x': not an absolute path or gs://bucket/prefix"),
    ("", "destination: empty; give an absolute path or gs://bucket/prefix")])
def test_uri_check_says_what_is_wrong(uri, expected):
    from nanodata.errors import NanodataError
    from nanodata.storage import check_uri

    with pytest.raises(NanodataError) as info:
        check_uri("destination", uri)
    assert expected in str(info.value) and "\n" not in str(info.value)


def _manifest_digests(dest, key):
    manifest = read_json(f"{dest}/builds/{key}/manifest.json")
    return [(s["name"], s["sha256"]) for s in manifest["shards"] + [manifest["val"]]]


def test_shard_task_crash_then_retry_leaves_the_same_complete_build(dag, built, bucket, source, monkeypatch):
    """A shard task's first attempt dies after half-writing one file into the build; Airflow's retry
    rewrites it whole: no duplicate, no lost doc, the same files."""
    from nanodata.jobs import tail

    _, ref_dest, key = built
    dest = f"gs://{bucket}/retry"
    real_write, crashed = storage.write_file, []

    def crashing_write(path, uri):
        if "/builds/" in uri and uri.endswith(".parquet") and not crashed:
            crashed.append(uri)
            storage.write_bytes(uri, open(path, "rb").read()[:100])
            raise ConnectionError("connection reset mid-upload")
        return real_write(path, uri)

    monkeypatch.setattr(tail.storage, "write_file", crashing_write)
    monkeypatch.setattr(dag.get_task("shard"), "retry_delay", timedelta(0))
    monkeypatch.setattr(dag.get_task("shard"), "retry_exponential_backoff", 0)
    dag_run = dag.test(run_conf=conf(source, dest))
    assert dag_run.state == "success" and len(crashed) == 1
    assert _manifest_digests(dest, key) == _manifest_digests(ref_dest, key)
    assert read_json(f"{dest}/latest.json")["key"] == key


def test_chunk_failure_then_clear_resumes_and_completes(dag, built, bucket, source, monkeypatch):
    """A chunk task fails for good; the run fails with nothing published. Clearing the run redoes only
    the failed batch and leaves the same build as an uninterrupted run."""
    from nanodata.pipeline.chunkbuild import partitions

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
    assert states["chunk"].count("failed") == 1 and len(states["chunk"]) >= 2 and states["route"] == ["upstream_failed"]
    assert not storage.exists(f"{dest}/builds/{key}/_COMPLETE") and not storage.exists(f"{dest}/latest.json")

    fail, chunked[:] = False, []
    rerun = dag.test(run_conf=conf(source, dest), logical_date=when, run_after=when)  # the same run, cleared
    assert rerun.run_id == failed.run_id and rerun.state == "success"
    assert len(failing) == 1 and chunked == failing  # finished partitions were not chunked again
    assert _manifest_digests(dest, key) == _manifest_digests(ref_dest, key)
    assert read_json(f"{dest}/latest.json")["docs"] == read_json(f"{ref_dest}/latest.json")["docs"]


@pytest.fixture
def scheduled(monkeypatch, airflow_db):
    """The DAG, freshly parsed, whose dag.test() makes the scheduler's nightly run instead of a manual one: run
    type "scheduled", no conf, so the Params' defaults (the demo's values here). Fresh, because dag.test(run_conf)
    leaves the conf's values in the DAG object's Params."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models import dagrun
    from airflow.utils.types import DagRunType

    real = dagrun.get_or_create_dagrun

    def as_scheduled(**kwargs):
        run = real(**kwargs)
        run.run_type = DagRunType.SCHEDULED
        kwargs["session"].commit()
        return run

    monkeypatch.setattr(dagrun, "get_or_create_dagrun", as_scheduled)
    monkeypatch.delenv("NANODATA_CPP_SOURCE", raising=False)
    monkeypatch.delenv("NANODATA_CPP_DEST", raising=False)
    return DagBag(dag_folder=str(REPO / "dags" / "nanodata_cpp_corpus.py")).dags["nanodata_cpp_corpus"]


def set_variables(**values):
    from airflow.models.variable import Variable

    for key, value in values.items():
        if value is None:
            Variable.delete(key)
        else:
            Variable.set(key, value)


def test_scheduled_run_with_nothing_configured_skips_and_says_what_to_set(scheduled, caplog):
    dag_run = scheduled.test()
    assert dag_run.run_type == "scheduled" and dag_run.state == "success"
    states = task_states(dag_run)
    assert states["plan"] == ["skipped"] and all(s == ["skipped"] for s in states.values()), states
    out = caplog.text  # the task's log records
    assert ("scheduled run skipped: the deployment configures no source and no destination to build. Set the Airflow "
            "Variable(s) nanodata_cpp_source and nanodata_cpp_dest (Admin > Variables) or NANODATA_CPP_SOURCE and "
            "NANODATA_CPP_DEST in the workers' environment") in out
    assert "/usr/include/c++" not in out.split("scheduled run skipped")[1]  # the demo default is never read


def test_scheduled_run_builds_the_configured_source_and_destination(scheduled, bucket, source, caplog, monkeypatch):
    """Airflow Variables configure the nightly build; the environment does when they are not set."""
    dest = f"gs://{bucket}/nightly"
    dag = scheduled
    defaults = {k: dag.params[k] for k in PARAMS}
    key = build_key(list_inputs(str(source)), build_params(defaults))
    monkeypatch.setenv("NANODATA_CPP_SOURCE", "/nonexistent/overridden")  # a Variable wins over the environment
    set_variables(nanodata_cpp_source=str(source), nanodata_cpp_dest=dest)
    try:
        dag_run = dag.test()
    finally:
        set_variables(nanodata_cpp_source=None, nanodata_cpp_dest=None)
    assert dag_run.run_type == "scheduled" and dag_run.state == "success", task_states(dag_run)
    latest = read_json(f"{dest}/latest.json")
    # the params published are what decides the corpus, every setting defaulted (as the build key hashes them)
    assert latest["key"] == key and latest["docs"] > 0 and latest["params"] == json.loads(json.dumps(build_params(defaults)))
    out = caplog.text  # the task's log records
    assert f"report: {dest}/builds/{key}/report/index.html" in out  # the report task logs its URI and page
    assert (f"report in the Airflow UI: http://localhost:8080/nanodata-reports/uri/gs/{bucket}/nightly/builds/{key}/"
            in out)

    monkeypatch.setenv("NANODATA_CPP_SOURCE", str(source))
    monkeypatch.setenv("NANODATA_CPP_DEST", dest)
    before = bucket_snapshot(bucket)
    dag_run = dag.test()
    assert dag_run.state == "success" and task_states(dag_run)["chunk"] == ["skipped"]  # the same build: up to date
    assert bucket_snapshot(bucket) == before


def test_reports_plugin_lists_the_published_build(built, bucket):
    """The plugin's list comes from the Asset events the DAG emitted: this build, its Params and counts, a link
    to its report in the bucket."""
    import importlib.util

    from airflow.api_fastapi.core_api.security import get_user
    from fastapi.testclient import TestClient

    _, dest, key = built
    spec = importlib.util.spec_from_file_location("nanodata_reports_dag_test", REPO / "plugins" / "nanodata_reports.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    plugin.app.dependency_overrides[get_user] = lambda: "test-user"
    client = TestClient(plugin.app)
    listing = client.get("/").text
    link = f"uri/gs/{bucket}/main/builds/{key}/"
    latest = read_json(f"{dest}/latest.json")
    row = next(r for r in listing.split("<tr>") if f'href="{link}"' in r)
    assert "<td>basic</td><td>256</td>" in row and f"<td>{latest['docs']:,}</td>" in row
    page = client.get(f"/{link}")
    assert page.status_code == 200 and page.content == storage.read_bytes(f"{dest}/builds/{key}/report/index.html")
    assert f"<th>build</th><td>{dest}/builds/{key}</td>" in page.text


def test_a_nightly_rebuild_reuses_unchanged_files_and_logs_no_false_error(dag, bucket, source, tmp_path, capfd):
    """Issue 30: the second night chunks only the changed file (the Asset event says so), and a run that succeeds
    prints no `XCom not found` error (route reads the chunk tasks' results by index)."""
    src = tmp_path / "src"
    shutil.copytree(source, src)
    dest = f"gs://{bucket}/nightly"
    assert dag.test(run_conf=conf(src, dest, partition_mb=256)).state == "success"
    steps = src / "projA" / "steps.cpp"
    steps.write_text(steps.read_text() + "int more(int v) { return v + 2; }\n")
    capfd.readouterr()
    assert dag.test(run_conf=conf(src, dest, partition_mb=256)).state == "success"
    printed = capfd.readouterr()
    assert "route" in printed.out + printed.err  # the run's task logs are what was captured
    assert "XCom not found" not in printed.out + printed.err
    reuse = asset_events("nanodata_cpp_corpus")[-1]["reuse"]
    assert reuse["files_chunked"] == 1 and reuse["files_reused"] == 6 and reuse["entries_rebuilt"] == 0
