"""nanodata_tokenizer and nanodata_pretokenize with dag.test() on a small corpus in the GCS emulator."""

import json

import pytest
from corpus import write_corpus
from dag_data import asset_events, task_states

from nanodata import storage
from nanodata.corpus import sync as corpus_sync
from nanodata.errors import NanodataError
from nanodata.jobs.derived import resolve_corpus


@pytest.fixture(scope="module")
def corpus(gcs_emulator, tmp_path_factory):
    """A published corpus: gs://BUCKET/c/builds/k1 (3 shards, the last val) and c/latest.json pointing at it."""
    bucket = gcs_emulator.create_bucket("dags-derived")
    local = tmp_path_factory.mktemp("corpus")
    write_corpus(local, n_files=3, docs_per_file=60)
    uri = f"gs://{bucket}/c/builds/k1"
    corpus_sync(str(local), uri)
    storage.write_bytes(f"gs://{bucket}/c/latest.json", json.dumps({"key": "k1", "uri": uri}).encode())
    return f"gs://{bucket}/c", uri, local


def test_tokenizer_trains_on_latest_corpus_and_uploads_next_to_it(dagbag, corpus, tmp_path):
    from nanodata.tokenizer import load

    dest, uri, _ = corpus
    dag_run = dagbag.dags["nanodata_tokenizer"].test(
        run_conf={"corpus": "", "destination": dest, "vocab_size": 300, "max_chars": 100_000})
    assert dag_run.state == "success"
    out = f"{dest}/tokenizers/k1-300"
    assert storage.exists(f"{out}/_COMPLETE")
    assert asset_events("nanodata_tokenizer")[-1] == {"uri": out, "corpus": uri, "vocab_size": 300}
    corpus_sync(out, str(tmp_path / "tok"))
    tok = load(str(tmp_path / "tok"))
    assert tok.n_vocab == 300
    text = "the model learns from data token shard loader"
    assert tok.decode(tok.encode(text)) == text


def test_pretokenize_writes_token_shards_and_meta(dagbag, corpus):
    import pyarrow.parquet as pq

    dest, uri, local = corpus
    dag_run = dagbag.dags["nanodata_pretokenize"].test(
        run_conf={"corpus": uri, "destination": dest, "tokenizer": "cl100k_base", "shard_tokens": 4000, "workers": 1})
    assert dag_run.state == "success"
    assert task_states(dag_run) == {"resolve": ["success"], "pretokenize": ["success"]}
    out = f"{dest}/tokens/k1-cl100k_base"
    meta = json.loads(storage.read_bytes(f"{out}/meta.json"))
    assert meta["docs"] == sum(pq.read_metadata(p).num_rows for p in local.glob("*.parquet"))
    names = storage.list_names(out)
    assert {s["name"] for s in meta["shards"]} | {"meta.json", "_COMPLETE"} == set(names)
    assert len(meta["shards"]) >= 2
    event = asset_events("nanodata_token_shards")[-1]
    assert event["uri"] == out and event["tokens"] == meta["tokens"] and event["docs"] == meta["docs"]


def test_corpus_resolution_order(corpus):
    dest, uri, _ = corpus
    assert resolve_corpus("gs://b/explicit/", dest, [{"uri": "gs://b/event"}]) == "gs://b/explicit"
    assert resolve_corpus("", dest, [{"uri": "gs://b/old"}, {"uri": "gs://b/new"}]) == "gs://b/new"
    assert resolve_corpus("", dest, []) == uri
    with pytest.raises(NanodataError, match="latest.json"):
        resolve_corpus("", dest + "/nothing-here", [])


def test_bad_corpus_uri_fails_the_first_task_in_words(dagbag, corpus, capfd):
    dag_run = dagbag.dags["nanodata_pretokenize"].test(run_conf={"corpus": "gs://Upper/c/builds/k1",
                                                                 "destination": corpus[0]})
    assert dag_run.state == "failed" and task_states(dag_run)["resolve"] == ["failed"]
    assert "corpus: 'gs://Upper/c/builds/k1': invalid bucket name 'Upper'" in capfd.readouterr().out


def test_invalid_vocab_size_is_rejected(dagbag, corpus):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        dagbag.dags["nanodata_tokenizer"].test(run_conf={"corpus": corpus[1], "vocab_size": 100})
