"""A real Airflow deployment builds a corpus: Postgres metadata DB, separate scheduler, dag-processor,
api-server and triggerer processes (plus a Celery worker on the Redis broker with CeleryExecutor),
the corpus DAG triggered through the REST API v2 with a conf, its output checked in the GCS emulator
bucket, its Asset event in the API, and its report page fetched from the reports plugin over HTTP.
"""

import io
import json
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests

from airflow_deploy import (AirflowDeployment, airflow_env, forget_queue, group_alive, postgres_database,
                            run_airflow, unknown_airflow_env)
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


def deployment(executor: str, home: Path, db_url: str, dest: str) -> AirflowDeployment:
    env = airflow_env(home, db_url, executor=executor, dags_folder=REPO / "dags", plugins_folder=REPO / "plugins",
                      extra={"NANODATA_REPORTS_DIR": dest,
                             # no nightly run on unpause: the triggered run is the one under test
                             "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"})
    assert unknown_airflow_env(env) == []
    run_airflow(["pools", "set", "gcs", "2", "nanodata GCS transfers"], env)
    components = [["scheduler"], ["dag-processor"], ["api-server"], ["triggerer"]]
    if executor == "CeleryExecutor":
        queue = env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]
        components.append(["celery", "worker", "--queues", queue, "--concurrency", "2", "--without-gossip",
                           "--without-mingle", "--celery-hostname", f"{queue}@%h"])
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
                    "tokenizer": "cl100k_base", "rows_per_file": 2, "val_fraction": 0.2}
            bad = af.api("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                         json={"logical_date": None, "conf": {**conf, "mode": "nonsense"}})
            assert bad.status_code == 400, bad.text  # Params are validated at the API
            run_id = af.trigger(DAG_ID, conf)
            af.wait_for_run(DAG_ID, run_id)

            tis = af.task_instances(DAG_ID, run_id)
            assert all(ti["state"] == "success" for ti in tis), af.task_summary(DAG_ID, run_id)
            assert sorted(ti["map_index"] for ti in tis if ti["task_id"] == "chunk") == [0, 1]  # one per project
            if executor == "CeleryExecutor":  # every task went through our queue to the Celery worker
                assert {ti["queue"] for ti in tis} == {af.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]}
                assert af.log_of("celery").count("Executing workload in Celery") == len(tis)

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
            assert f"<th>documents</th><td>{latest['docs']}</td>" in page.text
            svg = af.api("GET", f"/nanodata-reports/builds/{build}/crop_fraction.svg")
            assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
            assert requests.get(f"{af.url}/nanodata-reports/", timeout=30).status_code == 401  # login needed
            plugins = af.api("GET", "/api/v2/plugins").json()["plugins"]
            assert any(p["name"] == "nanodata_reports" and p["external_views"] for p in plugins)
    finally:
        forget_queue(af.env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"])
    for proc in af.procs.values():  # the deployment stopped every process group it started
        assert proc.poll() is not None and not group_alive(proc.pid)


def test_components_are_stopped_when_a_test_fails(metadata_db, tmp_path):
    env = airflow_env(tmp_path, metadata_db, executor="LocalExecutor", dags_folder=tmp_path, plugins_folder=tmp_path)
    af = AirflowDeployment(env, [["scheduler"], ["api-server"]])
    with pytest.raises(RuntimeError, match="a failing check"):
        with af:
            assert all(group_alive(p.pid) for p in af.procs.values())
            raise RuntimeError("a failing check")
    assert all(p.poll() is not None and not group_alive(p.pid) for p in af.procs.values())
