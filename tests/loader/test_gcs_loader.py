"""The loader reading gs://bucket/prefix in place (the real GCS emulator process): the same batches and states as
the same corpus in a local directory, exact resume across the two, streaming with objects uploaded during the
run, and nanodata.dataset's listing functions on a prefix."""

import threading
import time

import pytest
from batches import take
from corpus import make_docs, write_parquet
from loader_helpers import assert_same_batches, small_bestfit, small_concat, write_manifest_corpus

from nanodata import corpus, dataset, storage
from nanodata.errors import NanodataError
from nanodata.loader.source import DocumentSource

LOADERS = {"bestfit": small_bestfit, "requeue": lambda *a, **k: small_bestfit(*a, crop="requeue", **k),
           "concat": small_concat}


@pytest.fixture
def corpus_pair(tmp_path, gcs_bucket):
    """(local directory, gs:// URI) holding the same corpus."""
    local = write_manifest_corpus(tmp_path / "local")
    uri = f"gs://{gcs_bucket}/corpora/small"
    corpus.sync(local, uri)
    return local, uri


@pytest.mark.parametrize("kind", LOADERS)
def test_bucket_batches_and_states_equal_the_local_directory(tokenizer, corpus_pair, kind):
    local, uri = corpus_pair
    make = LOADERS[kind]
    for prefetch in (0, 2):
        for rank in (0, 1):
            expected = take(make(tokenizer, local, prefetch=prefetch, rank=rank, world_size=2), 30)
            got = take(make(tokenizer, uri, prefetch=prefetch, rank=rank, world_size=2), 30)
            assert expected[-1][2]["epoch"] >= 2  # epochs wrap: read-ahead runs into the next epoch
            assert_same_batches(expected, got)


@pytest.mark.parametrize("kind", LOADERS)
def test_resume_from_the_bucket_and_across_local_and_bucket(tokenizer, corpus_pair, kind):
    local, uri = corpus_pair
    make = LOADERS[kind]
    full = take(make(tokenizer, uri, prefetch=2), 40)
    for k in (0, 7, 19, 33):
        for saved_on, resumed_on in ((uri, uri), (local, uri), (uri, local)):
            state = full[k][2] if saved_on == uri else take(make(tokenizer, local, prefetch=0), k + 1)[k][2]
            resumed = take(make(tokenizer, resumed_on, prefetch=2, resume_state_dict=state), 4)
            assert_same_batches(full[k + 1:k + 5], resumed)


def test_a_state_naming_a_replaced_object_is_refused(tokenizer, corpus_pair):
    local, uri = corpus_pair
    state = take(small_bestfit(tokenizer, uri, prefetch=0), 3)[-1][2]
    name = state["files"][0][1]
    write_parquet(local / name, make_docs(40, seed=999, max_words=80), row_group_size=8)
    storage.write_file(local / name, f"{uri}/{name}")
    with pytest.raises(ValueError, match=f"{uri}/{name} changed since the resume state was saved"):
        small_bestfit(tokenizer, uri, prefetch=0, resume_state_dict=state)


def test_dataset_listing_and_reading_on_a_prefix(corpus_pair, gcs_bucket):
    local, uri = corpus_pair
    storage.write_bytes(f"{uri}/nested/shard_99999.parquet", (local / "shard_00000.parquet").read_bytes())
    storage.write_bytes(f"{uri}/shard_00009.parquet.tmp", b"partial")
    assert [p.rsplit("/", 1)[1] for p in dataset.list_parquet_files(uri)] == [
        p.name for p in dataset.list_parquet_files(local)]  # not the sub-prefix's object, not the partial
    train, val = dataset.split_files(uri + "/")
    assert train == [f"{uri}/shard_{i:05d}.parquet" for i in range(3)] and val == [f"{uri}/val_shard.parquet"]
    assert dataset.read_manifest(uri) == dataset.read_manifest(local)
    for name in ("shard_00001.parquet", "val_shard.parquet"):
        assert dataset.parquet_fingerprint(f"{uri}/{name}") == dataset.parquet_fingerprint(local / name)
    for split in ("train", "val"):
        assert list(dataset.parquets_iter_batched(split, 1, 2, data_dir=uri)) == list(
            dataset.parquets_iter_batched(split, 1, 2, data_dir=local))


def test_missing_bucket_prefix_and_objects_are_one_line_errors(tokenizer, corpus_pair, gcs_bucket):
    _, uri = corpus_pair
    with pytest.raises(NanodataError, match="bucket 'no-such-bucket-here' does not exist"):
        small_bestfit(tokenizer, "gs://no-such-bucket-here/x", prefetch=0)
    with pytest.raises(NanodataError, match=f"gs://{gcs_bucket}/empty: no .parquet files"):
        small_bestfit(tokenizer, f"gs://{gcs_bucket}/empty", prefetch=0)
    with pytest.raises(NanodataError, match="malformed gs:// URI"):
        small_bestfit(tokenizer, "gs:/bucket/x", prefetch=0)
    with pytest.raises(NanodataError, match=f"{uri}/nothing.parquet: no such object"):
        dataset.open_parquet(f"{uri}/nothing.parquet")


# -- streaming ------------------------------------------------------------------------------------------------
def _upload_slowly(local, uri, names, pause):
    for i, name in enumerate(names):
        time.sleep(pause)
        write_parquet(local / name, make_docs(24, seed=500 + i, max_words=40), row_group_size=8)
        storage.write_file(local / name, f"{uri}/{name}")
    time.sleep(pause)
    storage.write_bytes(f"{uri}/_COMPLETE", b"")


def _read_two_epochs(uri, rank, world_size, out):
    stop = threading.Event()  # what a loader's close sets: the source's read-ahead threads end with it
    source = DocumentSource(uri, "train", rank, world_size, slice_size=5, streaming=True, poll_interval=0.05,
                            stop=stop)
    epoch1, epoch2 = [], []
    try:
        while len(epoch2) < 5:
            _, ids = source.next_slice()
            (epoch1 if source.last_read[2] == 1 else epoch2).extend((source.name_of(s), rg, row) for s, rg, row in ids)
    finally:
        stop.set()
    out[rank] = epoch1, epoch2


@pytest.mark.parametrize("world_size", [1, 2])
def test_streaming_reads_objects_uploaded_during_the_run_once(tmp_path, gcs_bucket, world_size):
    uri = f"gs://{gcs_bucket}/growing"
    names = ["shard_00002.parquet", "val_shard.parquet", "shard_00000.parquet", "shard_00001.parquet"]
    writer = threading.Thread(target=_upload_slowly, args=(tmp_path, uri, names, 0.3))
    writer.start()
    results = {}
    readers = [threading.Thread(target=_read_two_epochs, args=(uri, rank, world_size, results))
               for rank in range(world_size)]
    for thread in readers:
        thread.start()
    for thread in readers + [writer]:
        thread.join()
    epoch1 = sorted(doc for rank in range(world_size) for doc in results[rank][0])
    train = sorted(name for name in names if name.startswith("shard"))
    assert epoch1 == sorted((name, rg, row) for name in train for rg in range(3) for row in range(8))
    assert [name for name, _, _ in results[0][0]][:8] == ["shard_00002.parquet"] * 8  # read as it appeared
    assert results[0][1][0] == ("shard_00000.parquet", 0, 0)  # epoch 2: the full sorted listing


def test_streaming_loader_on_a_bucket_resumes_exactly(tokenizer, tmp_path, gcs_bucket):
    uri = f"gs://{gcs_bucket}/stream"
    _upload_slowly(tmp_path, uri, ["shard_00000.parquet", "shard_00001.parquet"], 0)

    def loader(**kwargs):
        return small_bestfit(tokenizer, uri, T=32, buffer_size=20, streaming=True, poll_interval=0.05, **kwargs)

    full = take(loader(prefetch=0), 40)
    assert full[-1][2]["epoch"] >= 2
    for k in (0, 9, 21, 33):
        assert_same_batches(full[k + 1:k + 6], take(loader(prefetch=2, resume_state_dict=full[k][2]), 5))
