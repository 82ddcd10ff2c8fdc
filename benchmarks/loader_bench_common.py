"""Shared setup for benchmarks/bench_loader_*.py: corpora, a lookup tokenizer, and the published loader.

The published algorithm's plain implementation lives in tests/loader/published_loader.py (the tests' oracle);
the benchmarks run it side by side with nanodata's loader, in the same process, on the same data.
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "loader")]

import published_loader  # noqa: E402
from corpus import WORDS, write_parquet  # noqa: E402

__all__ = ["BOS", "LookupTokenizer", "WORDS", "doc_lengths", "number_corpus", "published_loader", "rss_mb",
           "write_parquet"]

BOS = 50256


def doc_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Token counts shaped like web text: log-normal, median ~600 tokens, a long tail past T=2048."""
    return np.maximum(1, np.random.default_rng(seed).lognormal(6.4, 1.0, size=n)).astype(np.int64)


class LookupTokenizer:
    """Duck-typed tokenizer whose texts are doc numbers, looked up in a pool of pre-tokenized docs (BOS already in
    front): packing cost without tokenizing. Both loaders only read the lists they get, so sharing them is safe."""

    def __init__(self, pool_size: int = 3000, seed: int = 0, as_arrays: bool = False):
        rng = np.random.default_rng(seed)
        self.pool = [np.concatenate(([BOS], rng.integers(0, 50000, size=n))) for n in doc_lengths(pool_size, seed)]
        if not as_arrays:  # what a real tokenizer returns: Python ints, which any loader must convert
            self.pool = [doc.tolist() for doc in self.pool]

    def get_bos_token_id(self):
        return BOS

    def encode(self, texts, prepend=None, num_threads=4):
        assert prepend == BOS
        return [self.pool[int(text) % len(self.pool)] for text in texts]


def number_corpus(n_docs: int, files: int = 4) -> Path:
    """`files` train shards + a val shard whose texts are doc numbers, in row groups of 1024 (as published)."""
    data_dir = Path(tempfile.mkdtemp(prefix="nanodata_bench_"))
    per_file = n_docs // files
    for i in range(files + 1):
        write_parquet(data_dir / f"shard_{i:05d}.parquet", [str(j) for j in range(i * per_file, (i + 1) * per_file)],
                      row_group_size=1024)
    return data_dir


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")
