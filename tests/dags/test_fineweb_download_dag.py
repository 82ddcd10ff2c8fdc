"""nanodata_fineweb_download with dag.test(): shards served over real HTTP, uploaded to the GCS emulator."""

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from corpus import write_corpus
from dag_data import asset_events, bucket_snapshot, task_states

from nanodata import storage


@pytest.fixture(scope="module")
def shard_server(tmp_path_factory):
    """An HTTP server with three parquet shards (shard_00000..2.parquet); shard 3 is a 404."""
    root = tmp_path_factory.mktemp("served")
    write_corpus(root, n_files=3, docs_per_file=40)
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", root
    server.shutdown()


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.dags["nanodata_fineweb_download"]


@pytest.fixture(scope="module")
def bucket(gcs_emulator):
    return gcs_emulator.create_bucket("dags-fineweb")


def test_download_uploads_verified_shards_then_complete(dag, shard_server, bucket):
    url, root = shard_server
    dest = f"gs://{bucket}/fineweb"
    dag_run = dag.test(run_conf={"base_url": url, "num_shards": 3, "workers": 2, "destination": dest})
    assert dag_run.state == "success"
    assert task_states(dag_run)["download"] == ["success"] * 3
    for i in range(3):
        name = f"shard_{i:05d}.parquet"
        assert storage.read_bytes(f"{dest}/{name}") == (root / name).read_bytes()
    assert storage.list_names(dest) == ["_COMPLETE"] + [f"shard_{i:05d}.parquet" for i in range(3)]
    event = asset_events("nanodata_fineweb")[-1]
    assert event["uri"] == dest and event["shards"] == 3 and event["downloaded"] == 3

    shards = {n: g for n, g in bucket_snapshot(bucket).items() if n.endswith(".parquet")}
    assert dag.test(run_conf={"base_url": url, "num_shards": 3, "workers": 2, "destination": dest}).state == "success"
    assert asset_events("nanodata_fineweb")[-1]["downloaded"] == 0  # a re-run fetches nothing
    assert {n: g for n, g in bucket_snapshot(bucket).items() if n.endswith(".parquet")} == shards


def test_missing_shard_fails_without_retries_and_without_complete(dag, shard_server, bucket):
    url, _ = shard_server
    dest = f"gs://{bucket}/partial"
    dag_run = dag.test(run_conf={"base_url": url, "num_shards": 4, "workers": 2, "destination": dest})
    assert dag_run.state == "failed"
    states = task_states(dag_run)
    assert sorted(states["download"]) == ["failed", "success", "success", "success"]
    assert states["finalize"] == ["upstream_failed"]
    assert not storage.exists(f"{dest}/_COMPLETE")
    assert len(storage.list_names(dest)) == 3  # the three good shards are kept for the next run


@pytest.mark.parametrize("bad", [{"num_shards": 0}, {"workers": 100}])
def test_invalid_params_are_rejected(dag, bad):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dag.test(run_conf={"base_url": "http://127.0.0.1:1", "num_shards": 1, "workers": 1,
                           "destination": "gs://dags-fineweb/never", **bad})


@pytest.mark.parametrize("bad, expected", [
    ({"destination": "bucket/no-scheme"}, "destination 'bucket/no-scheme': not an absolute path or gs://bucket/prefix"),
    ({"base_url": "ftp://x"}, "--base-url must be an http(s) URL like https://host/path, not 'ftp://x'")])
def test_bad_urls_fail_the_first_task_in_words(dag, capfd, bad, expected):
    dag_run = dag.test(run_conf={"base_url": "http://127.0.0.1:1", "num_shards": 1, "workers": 1,
                                 "destination": "gs://dags-fineweb/never", **bad})
    assert dag_run.state == "failed" and task_states(dag_run)["plan"] == ["failed"]
    out = capfd.readouterr().out
    assert expected in out and "does not match" not in out
