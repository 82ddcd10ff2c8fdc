"""Helpers shared by the loader tests."""

import json

from corpus import make_docs, write_parquet
from nanodata.loader import (tokenizing_distributed_data_loader_with_state,
                             tokenizing_distributed_data_loader_with_state_bos_bestfit)


def write_small_corpus(tmp_path):
    """3 train shards + 1 val shard (the last file) of 40 short docs in row groups of 8: epochs pass quickly."""
    data_dir = tmp_path / "small"
    for i in range(4):
        write_parquet(data_dir / f"shard_{i:05d}.parquet", make_docs(40, seed=70 + i, max_words=80), row_group_size=8)
    return data_dir


def as_json(state):
    return json.loads(json.dumps(state))


def take(loader, n):
    """n batches as (inputs, targets, state) with tensors cloned (the loader reuses its buffers)."""
    out = []
    for _ in range(n):
        inputs, targets, state, *_ = next(loader)
        out.append((inputs.clone(), targets.clone(), as_json(state)))
    return out


def small_bestfit(tokenizer, data_dir, B=2, T=48, **kwargs):
    """The best-fit loader at the resume tests' sizes: a buffer of 30 docs, slices of 8, on the CPU."""
    kwargs = {"tokenizer_batch_size": 8, "buffer_size": 30, "device": "cpu", **kwargs}
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(tokenizer, B, T, "train", data_dir=data_dir,
                                                                     **kwargs)


def small_concat(tokenizer, data_dir, B=2, T=48, **kwargs):
    kwargs = {"tokenizer_batch_size": 8, "device": "cpu", **kwargs}
    return tokenizing_distributed_data_loader_with_state(tokenizer, B, T, "train", data_dir=data_dir, **kwargs)
