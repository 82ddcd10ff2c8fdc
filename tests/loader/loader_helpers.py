"""Helpers shared by the loader tests."""

import json

from corpus import make_docs, write_parquet


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
