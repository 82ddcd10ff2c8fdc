"""Deterministic synthetic pretraining corpora for tests: parquet files with a `text` column."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = ("the model learns from data token shard loader packing parquet bucket stream epoch rank world "
         "gradient memory buffer document row group train val compile kernel tensor device batch").split()


def make_docs(n: int, seed: int = 0, min_words: int = 0, max_words: int = 400) -> list[str]:
    """n docs of varied length (some empty, some long enough to be cropped at small T)."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        k = rng.choice([rng.randint(min_words, 20), rng.randint(min_words, max_words)])
        docs.append(f"doc{seed}-{i}: " + " ".join(rng.choice(WORDS) for _ in range(k)) if k else "")
    return docs


def write_parquet(path: Path, texts: list[str], row_group_size: int = 64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": texts}), path, row_group_size=row_group_size)
    return path


def write_corpus(data_dir: Path, n_files: int = 4, docs_per_file: int = 300, row_group_size: int = 64,
                 seed: int = 0, names: str = "shard_{:05d}.parquet") -> list[Path]:
    """n_files parquet shards; with the default names the last one is val (nanochat convention)."""
    return [write_parquet(Path(data_dir) / names.format(i), make_docs(docs_per_file, seed=seed * 1000 + i),
                          row_group_size) for i in range(n_files)]


def write_small_corpus(data_dir: Path, seed: int = 70) -> Path:
    """3 train shards + 1 val shard (the last file) of 40 short docs in row groups of 8: epochs pass quickly."""
    for i in range(4):
        write_parquet(Path(data_dir) / f"shard_{i:05d}.parquet", make_docs(40, seed=seed + i, max_words=80),
                      row_group_size=8)
    return Path(data_dir)
