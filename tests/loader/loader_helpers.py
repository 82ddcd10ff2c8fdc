"""Helpers shared by the loader tests."""

import json

import corpus
import torch
from corpus import make_docs, write_parquet

from nanodata.loader import (
    tokenizing_distributed_data_loader_with_state,
    tokenizing_distributed_data_loader_with_state_bos_bestfit,
)
from nanodata.storage.files import file_digest


def write_small_corpus(tmp_path):
    return corpus.write_small_corpus(tmp_path / "small")


def small_bestfit(tokenizer, data_dir, B=2, T=48, **kwargs):
    """The best-fit loader at the resume tests' sizes: a buffer of 30 docs, slices of 8, on the CPU."""
    kwargs = {"tokenizer_batch_size": 8, "buffer_size": 30, "device": "cpu", **kwargs}
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(tokenizer, B, T, "train", data_dir=data_dir,
                                                                     **kwargs)


def small_concat(tokenizer, data_dir, B=2, T=48, **kwargs):
    kwargs = {"tokenizer_batch_size": 8, "device": "cpu", **kwargs}
    return tokenizing_distributed_data_loader_with_state(tokenizer, B, T, "train", data_dir=data_dir, **kwargs)


def write_manifest_corpus(data_dir, n_train=3, seed=70):
    """n_train shards + val_shard.parquet of short docs in row groups of 8, and a manifest with crc32c."""
    names = [f"shard_{i:05d}.parquet" for i in range(n_train)]
    for i, name in enumerate([*names, "val_shard.parquet"]):
        write_parquet(data_dir / name, make_docs(40, seed=seed + i, max_words=80), row_group_size=8)
    write_manifest(data_dir, names, "val_shard.parquet")
    (data_dir / "_COMPLETE").write_text("")
    return data_dir


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for k, ((x1, y1, s1), (x2, y2, s2)) in enumerate(zip(a, b, strict=False)):
        assert torch.equal(x1, x2) and torch.equal(y1, y2), f"batch {k}"
        assert s1 == s2, f"state {k}"


def write_manifest(data_dir, train_names, val_name):
    """A to-parquet style manifest.json naming each shard with its crc32c."""
    def entry(name):
        return {"name": name, "crc32c": file_digest(data_dir / name, "crc32c")}

    manifest = {"version": 1, "shards": [entry(name) for name in train_names], "val": entry(val_name)}
    (data_dir / "manifest.json").write_text(json.dumps(manifest))
