"""A real Airflow deployment builds a corpus: Postgres metadata DB, separate scheduler, dag-processor,
api-server and triggerer processes (plus a Celery worker on the Redis broker with CeleryExecutor),
the corpus DAG triggered through the REST API v2 with a conf, its output checked in the GCS emulator
bucket, its Asset event in the API, and its report page fetched from the reports plugin over HTTP.
With two Celery workers, the mapped chunk tasks of one build run on both at the same time.
"""

import io
import itertools
import json
import uuid
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests
from airflow_deploy import (
    AirflowDeployment,
    airflow_env,
    celery_workers,
    forget_queue,
    group_alive,
    postgres_database,
    run_airflow,
    unknown_airflow_env,
)

from nanodata import storage

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "nanodata_cpp_corpus"
# two small C++ projects: one mapped chunk task each
SOURCES = {
    "geometry/vec.h": "#pragma once\nstruct Vec { double x, y; };\ndouble dot_product(Vec a, Vec b);\n",
    "geometry/vec.cpp": '#include "vec.h"\n\ndouble dot_product(Vec a, Vec b) {\n    return a.x * b.x + a.y * b.y;\n}\n'
                        "\nVec scale_vector(Vec v, double k) {\n    return Vec{v.x * k, v.y * k};\n}\n",
    "counter/counter.cpp": "#include <map>\n#include <string>\n\nnamespace text {\n"
                           "int count_words(const std::string& s) {\n    int n = 0;\n    bool in = false;\n"
                           "    for (char c : s) { if (c == ' ') in = false; else if (!in) { in = true; ++n; } }\n"
                           "    return n;\n}\n}  // namespace text\n",
}
FUNCTIONS = ("dot_product", "scale_vector", "count_words")
LIBSTDCXX = Path("/usr/include/c++/12/bits")  # real, varied C++ to chunk
pytestmark = pytest.mark.usefixtures("deploy_services")  # PostgreSQL and Redis, the machine's or our own


@pytest.fixture(scope="module")
def metadata_db(tmp_path_factory):
    """One fresh Postgres database for the module, migrated once; dropped at the end."""
    with postgres_database() as url:
        home = tmp_path_factory.mktemp("migrate-home")
        run_airflow(["db", "migrate"], airflow_env(home, url, executor="LocalExecutor", dags_folder=home,
                                                   plugins_folder=home))
        yield url


@pytest.fixture(scope="module")
def cpp_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpp-source")
    for name, text in SOURCES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def deployment(executor: str, home: Path, db_url: str, dest: str, *, workers: int = 1,
               concurrency: int = 2) -> AirflowDeployment:
    """With CeleryExecutor: `workers` Celery workers of `concurrency` slots each; with several, task instances
    record the Celery node that ran them as their hostname."""
    env = airflow_env(home, db_url, executor=executor, dags_folder=REPO / "dags", plugins_folder=REPO / "plugins",
                      extra={"NANODATA_REPORTS_DIR": dest,
                             # no nightly run on unpause: the triggered run is the one under test
                             "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"},
                      celery_node_hostnames=executor == "CeleryExecutor" and workers > 1)
    assert unknown_airflow_env(env) == []
    run_airflow(["pools", "set", "gcs", "2", "nanodata GCS transfers"], env)
    components = [["scheduler"], ["dag-processor"], ["api-server"], ["triggerer"]]
    if executor == "CeleryExecutor":
        components += celery_workers(env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"], workers, concurrency)
    return AirflowDeployment(env, components)


def check_build_in_bucket(dest: str) -> dict:
    """latest.json → builds/<key>/: manifest, _COMPLETE, every shard; the docs hold our functions."""
    latest = json.loads(storage.read_bytes(f"{dest}/latest.json"))
    build = latest["uri"]
    assert build == f"{dest}/builds/{latest['key']}"
    manifest = json.loads(storage.read_bytes(f"{build}/manifest.json"))
    assert storage.exists(f"{build}/_COMPLETE")
    names = set(storage.list_names(build))
    texts = []
    for shard in manifest["shards"] + ([manifest["val"]] if manifest.get("val") else []):
        data = storage.read_bytes(f"{build}/{shard['name']}")
        assert len(data) == shard["bytes"] and shard["name"] in names
        texts += pq.read_table(io.BytesIO(data))["text"].to_pylist()
    assert len(texts) == manifest["total_rows"] == latest["docs"] > 0
    for fn in FUNCTIONS:
        assert any(fn in t for t in texts), fn
    return latest


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["LocalExecutor", "CeleryExecutor"])
def test_corpus_build_in_a_real_deployment(executor, metadata_db, gcs_emulator, cpp_source, tmp_path):
    bucket = f"deploy-{executor.lower()}-{uuid.uuid4().hex[:6]}"
    gcs_emulator.create_bucket(bucket)
    dest = f"gs://{bucket}/cpp"
    home = tmp_path / "airflow-home"
    home.mkdir()
    af = deployment(executor, home, metadata_db, dest)
    try:
        with af:
            assert af.wait_for_dag(DAG_ID)["dag_id"] == DAG_ID
            conf = {"source": str(cpp_source), "destination": dest, "mode": "basic", "max_tokens": 256,
                    "tokenizer": "cl100k_base", "rows_per_file": 2, "val_fraction": 0.2, "partition_mb": 1e-6}
            bad = af.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                         json={"logical_date": None, "conf": {**conf, "mode": "nonsense"}})
            assert bad.status_code == 400, bad.text  # Params are validated at the API
            run_id = af.trigger(DAG_ID, conf)
            af.wait_for_run(DAG_ID, run_id)

            tis = af.task_instances(DAG_ID, run_id)
            check_paging(af, run_id, tis)
            ran = [ti for ti in tis if ti["task_id"] != "parse"]  # basic mode: parse is skipped, nothing to index
            assert all(ti["state"] == "success" for ti in ran), af.task_summary(DAG_ID, run_id)
            assert [ti["state"] for ti in tis if ti["task_id"] == "parse"] == ["skipped"]
            assert len([ti for ti in tis if ti["task_id"] == "chunk"]) >= 2  # a partition per file
            if executor == "CeleryExecutor":  # every task went through our queue to the Celery worker
                assert {ti["queue"] for ti in tis} == {af.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]}
                assert af.log_of("celery").count("Executing workload in Celery") == len(ran)

            latest = check_build_in_bucket(dest)
            assert storage.exists(f"{latest['uri']}/report/index.html")  # the DAG's report task uploaded it
            events = af.api("GET", "/api/v2/assets/events",
                            params={"source_dag_id": DAG_ID, "source_run_id": run_id}).json()["asset_events"]
            assert [e["extra"]["uri"] for e in events] == [latest["uri"]]
            assert events[0]["extra"]["docs"] == latest["docs"]

            build = f"builds/{latest['key']}"
            listing = af.api("GET", "/nanodata-reports/")
            assert listing.status_code == 200 and f'href="builds/{build}/"' in listing.text
            page = af.api("GET", f"/nanodata-reports/builds/{build}/")
            assert page.status_code == 200 and "nanodata build report" in page.text
            assert f"<th>documents</th><td>{latest['docs']:,}</td>" in page.text
            svg = af.api("GET", f"/nanodata-reports/builds/{build}/crop_fraction.svg")
            assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
            assert requests.get(f"{af.url}/nanodata-reports/", timeout=30).status_code == 401  # login needed
            plugins = af.api("GET", "/api/v2/plugins").json()["plugins"]
            assert any(p["name"] == "nanodata_reports" and p["external_views"] for p in plugins)
    finally:
        forget_queue(af.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"])
    for proc in af.procs.values():  # the deployment stopped every process group it started
        assert proc.poll() is not None and not group_alive(proc.pid)
    task_logs = sorted((home / "logs").rglob("*.log"))
    assert len(task_logs) >= len(ran)
    # Airflow imports starlette.testclient as it starts (svcs.fastapi): without httpx2 that warns in its logs
    warned = [p.name for p in [*task_logs, *home.glob("*.log")] if "StarletteDeprecationWarning" in p.read_text(errors="replace")]
    assert not warned, warned


def check_paging(af: AirflowDeployment, run_id: str, tis: list[dict]) -> None:
    """task_instances pages through the API: as many as it counts, each once, whatever the page size."""
    def keys(tis):
        return sorted((ti["task_id"], ti["map_index"]) for ti in tis)

    r = af.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 1})
    total = r.json()["total_entries"]
    assert len(tis) == total and len(set(keys(tis))) == total
    assert keys(af.task_instances(DAG_ID, run_id, page=3)) == keys(tis) and total > 3 * 2  # several pages


def write_cpp_jsonl(root: Path, files: int, mb: float) -> Path:
    """`files` JSONL inputs of ~`mb` MB: libstdc++ headers, each record's text made distinct by its own
    comment and function, so no two records (or their last units) are the same."""
    headers = [p.read_text(errors="replace") for p in sorted(LIBSTDCXX.glob("*.h"))]
    root.mkdir()
    for i in range(files):
        size = 0
        with open(root / f"part{i}.jsonl", "w") as f:
            for j in itertools.count():
                if size >= mb * 2 ** 20:
                    break
                text = (f"// input {i}, record {j}\n{headers[(i * 37 + j) % len(headers)]}\n"
                        f"int nanodata_record_{i}_{j}() {{ return {j}; }}\n")
                size += f.write(json.dumps({"text": text}) + "\n")
    return root


@pytest.mark.slow
def test_mapped_chunks_of_one_build_run_at_once_on_two_celery_workers(metadata_db, gcs_emulator, tmp_path):
    """Two Celery workers of one slot each on the deployment's queue: the chunk tasks mapped in one run of the
    corpus DAG are spread over both, and two of them, on different workers, run at the same time."""
    from celery.utils.nodenames import default_nodename, host_format

    source = write_cpp_jsonl(tmp_path / "source", files=4, mb=2)
    bucket = f"deploy-2workers-{uuid.uuid4().hex[:6]}"
    gcs_emulator.create_bucket(bucket)
    dest = f"gs://{bucket}/cpp"
    home = tmp_path / "airflow-home"
    home.mkdir()
    af = deployment("CeleryExecutor", home, metadata_db, dest, workers=2, concurrency=1)
    queue = af.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]
    nodes = {host_format(default_nodename(f"worker{i}-{queue}@%h")) for i in (1, 2)}
    try:
        with af:
            af.wait_for_dag(DAG_ID)
            # partition_mb: the size of a work partition (Airflow also takes conf keys that are not Params)
            run_id = af.trigger(DAG_ID, {"source": str(source), "destination": dest, "mode": "basic",
                                         "max_tokens": 2048, "partition_mb": 1})
            af.wait_for_run(DAG_ID, run_id, timeout=180)
            tis = af.task_instances(DAG_ID, run_id)
            summary = af.task_summary(DAG_ID, run_id)
    finally:
        forget_queue(queue)

    chunks = sorted((ti for ti in tis if ti["task_id"] == "chunk"), key=lambda ti: ti["start_date"] or "")
    intervals = [(ti["map_index"], ti["hostname"], datetime.fromisoformat(ti["start_date"]),
                  datetime.fromisoformat(ti["end_date"])) for ti in chunks if ti["start_date"] and ti["end_date"]]
    t0 = min((start for _, _, start, _ in intervals), default=None)
    print(f"chunk tasks of {run_id}, seconds from {t0}:")
    for index, host, start, end in intervals:  # for the log
        print(f"chunk[{index}] on {host}: {(start - t0).total_seconds():6.2f}s .. {(end - t0).total_seconds():6.2f}s"
              f" ({(end - start).total_seconds():.2f}s)")
    assert len(chunks) >= 2, summary
    assert all(ti["state"] == "success" for ti in chunks), summary
    assert {ti["queue"] for ti in tis} == {queue}
    assert {ti["hostname"] for ti in chunks} == nodes  # both workers ran chunk tasks, and no one else did
    overlapping = [(a, b) for a, b in itertools.combinations(intervals, 2)
                   if a[1] != b[1] and a[2] < b[3] and b[2] < a[3]]
    assert overlapping, f"no two chunk tasks on different workers ran at the same time: {intervals}"
    latest = json.loads(storage.read_bytes(f"{dest}/latest.json"))
    assert latest["docs"] > 0 and storage.exists(f"{latest['uri']}/_COMPLETE")
    for proc in af.procs.values():
        assert proc.poll() is not None and not group_alive(proc.pid)


def test_components_are_stopped_when_a_test_fails(metadata_db, tmp_path):
    env = airflow_env(tmp_path, metadata_db, executor="LocalExecutor", dags_folder=tmp_path, plugins_folder=tmp_path)
    af = AirflowDeployment(env, [["scheduler"], ["api-server"]])
    with pytest.raises(RuntimeError, match="a failing check"):
        with af:
            assert all(group_alive(p.pid) for p in af.procs.values())
            raise RuntimeError("a failing check")
    assert all(p.poll() is not None and not group_alive(p.pid) for p in af.procs.values())
