"""Streaming mode: shards appear while the loader runs; each is read once per epoch; val never mixes in."""

import json
import logging
import os
import threading
import time

import pytest
import torch
from batches import take
from corpus import make_docs, write_parquet

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit
from nanodata.loader.source import DocumentSource


def _publish(data_dir, name, docs, row_group_size=8):
    """Write under a temporary name, then rename: the loader must never see half a file."""
    tmp = write_parquet(data_dir / (name + ".tmp"), docs, row_group_size)
    os.replace(tmp, data_dir / name)


def _write_slowly(data_dir, names, pause):
    data_dir.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        time.sleep(pause)
        _publish(data_dir, name, make_docs(24, seed=500 + i, max_words=40))
    time.sleep(pause)
    (data_dir / "_COMPLETE").write_text("")


def _read_two_epochs(data_dir, rank, world_size, out):
    source = DocumentSource(data_dir, "train", rank, world_size, slice_size=5, streaming=True, poll_interval=0.02)
    epoch1, epoch2 = [], []
    while len(epoch2) < 5:
        _, ids = source.next_slice()
        (epoch1 if source.last_read[2] == 1 else epoch2).extend((source.name_of(s), rg, row) for s, rg, row in ids)
    out[rank] = epoch1, epoch2


@pytest.mark.parametrize("world_size", [1, 2])
def test_shards_appearing_during_the_run_are_each_read_once(tmp_path, world_size):
    data_dir = tmp_path / "growing"
    names = ["shard_00002.parquet", "val_shard.parquet", "shard_00000.parquet", "shard_00001.parquet",
             "shard_00003.parquet"]
    writer = threading.Thread(target=_write_slowly, args=(data_dir, names, 0.15))
    writer.start()
    results = {}
    readers = [threading.Thread(target=_read_two_epochs, args=(data_dir, rank, world_size, results))
               for rank in range(world_size)]
    for thread in readers:
        thread.start()
    for thread in readers + [writer]:
        thread.join()
    epoch1 = [doc for rank in range(world_size) for doc in results[rank][0]]
    train = sorted(n for n in names if n.startswith("shard"))
    expected = sorted((name, rg, row) for name in train for rg in range(3) for row in range(8))
    assert sorted(epoch1) == expected  # every train doc exactly once across ranks, no val doc
    assert [name for name, _, _ in results[0][0]][:8] == ["shard_00002.parquet"] * 8  # read as soon as it appeared
    assert results[0][1][0] == ("shard_00000.parquet", 0, 0)  # epoch 2: the full sorted listing


def test_loader_waits_with_a_log_line_then_trains(tmp_path, tokenizer, caplog):
    caplog.set_level(logging.WARNING, logger="nanodata.loader")
    data_dir = tmp_path / "empty_at_first"
    writer = threading.Thread(target=_write_slowly, args=(data_dir, ["shard_00000.parquet", "shard_00001.parquet"],
                                                          0.2))
    writer.start()
    loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, 2, 32, "train", tokenizer_batch_size=8, device="cpu", buffer_size=20, data_dir=data_dir,
        streaming=True, poll_interval=0.02, prefetch=2)
    batches = take(loader, 30)  # more than one epoch: only ends once _COMPLETE is there
    writer.join()
    assert "waiting for new train shards" in caplog.text
    assert batches[-1][2]["epoch"] >= 2
    assert sorted(batches[-1][2]["epoch_files"]) == ["shard_00000.parquet", "shard_00001.parquet"]


def test_val_split_streams_only_the_explicit_val_file(tmp_path):
    data_dir = tmp_path / "with_val"
    for name in ["shard_00000.parquet", "shard_00001.parquet", "val_shard.parquet"]:
        _publish(data_dir, name, make_docs(8, seed=len(name)), row_group_size=8)
    (data_dir / "_COMPLETE").write_text("")
    source = DocumentSource(data_dir, "val", 0, 1, slice_size=8, streaming=True, poll_interval=0.02)
    names = {source.name_of(source.next_slice()[1][0][0]) for _ in range(3)}
    assert names == {"val_shard.parquet"}


def test_manifest_decides_the_split_while_streaming(tmp_path):
    data_dir = tmp_path / "manifest"
    for name in ["a.parquet", "b.parquet", "c.parquet"]:
        _publish(data_dir, name, make_docs(8, seed=len(name)), row_group_size=8)
    manifest = {"version": 1, "shards": [{"name": "a.parquet"}, {"name": "c.parquet"}], "val": {"name": "b.parquet"}}
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
    (data_dir / "_COMPLETE").write_text("")
    source = DocumentSource(data_dir, "train", 0, 1, slice_size=8, streaming=True, poll_interval=0.02)
    names = [source.name_of(source.next_slice()[1][0][0]) for _ in range(4)]
    assert names == ["a.parquet", "c.parquet", "a.parquet", "c.parquet"]


def test_streaming_resume_is_exact(tmp_path, tokenizer):
    data_dir = tmp_path / "complete"
    _write_slowly(data_dir, ["shard_00000.parquet", "shard_00001.parquet"], 0)

    def loader(**kwargs):
        return tokenizing_distributed_data_loader_with_state_bos_bestfit(
            tokenizer, 2, 32, "train", tokenizer_batch_size=8, device="cpu", buffer_size=20, data_dir=data_dir,
            streaming=True, poll_interval=0.02, **kwargs)

    full = take(loader(prefetch=0), 40)
    assert full[-1][2]["epoch"] >= 2
    for k in (0, 9, 21, 33):
        resumed = take(loader(prefetch=2, resume_state_dict=full[k][2]), 5)
        for j, (inputs, targets, _) in enumerate(resumed, start=k + 1):
            assert torch.equal(inputs, full[j][0]) and torch.equal(targets, full[j][1])
