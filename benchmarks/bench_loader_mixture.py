"""Mixtures, B=32, T=2048, buffer 1000, tokenizer replaced by a lookup of pre-tokenized docs, so that packing and
the mixture's bookkeeping are what is measured: a 2-source mixture (weights 1:1) next to a single data_dir over
the same files (the sources are its train shards split in two), same process. Goal >= 0.9x. Docs as numpy arrays
isolate the packing; as lists of Python ints (what a tokenizer returns) they add the int conversion every loader
pays per token placed, as in bench_loader_packing.py.

Then the JSON state size with 2 sources at buffer 1000 and with 8 (goals <= 64 KB and <= 256 KB), with
crop="requeue" (ids of requeued tails carry an offset): the largest of several batches' states.

Throughput is CPU time of this thread, best of interleaved rounds, as in bench_loader_packing.py.
"""

import json
import shutil
import tempfile
from pathlib import Path

from bench_loader_packing import seconds_per_batch
from loader_bench_common import LookupTokenizer, number_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit

B, T, BUFFER = 32, 2048, 1000
ROUNDS, BATCHES = 7, 100
STATE_LIMITS = {2: 64 * 1024, 8: 256 * 1024}


def split_sources(data_dir: Path, parts: int) -> list[Path]:
    """`parts` data dirs that share data_dir's val shard and split its train shards between them (symlinks)."""
    *train, val = sorted(data_dir.glob("*.parquet"))
    root = Path(tempfile.mkdtemp(prefix="nanodata_bench_sources_"))
    dirs = []
    for i in range(parts):
        part = root / f"source{i}"
        part.mkdir()
        for shard in [*train[i::parts], val]:
            (part / shard.name).symlink_to(shard)
        dirs.append(part)
    return dirs


def bestfit(tokenizer, **kwargs):
    kwargs = {"device": "cpu", "buffer_size": BUFFER, "prefetch": 0, **kwargs}
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(tokenizer, B, T, "train", **kwargs)


def throughput(data_dir: Path, tokenizer) -> tuple[float, float]:
    """Mtok/s of a 2-source mixture and of the single data_dir holding the same shards."""
    sources = split_sources(data_dir, 2)
    try:
        mixture = bestfit(tokenizer, sources=[{"data_dir": str(d), "weight": 1} for d in sources])
        single = bestfit(tokenizer, data_dir=data_dir)
        mixture_s = single_s = float("inf")
        for _ in range(ROUNDS):
            mixture_s = min(mixture_s, seconds_per_batch(mixture, BATCHES))
            single_s = min(single_s, seconds_per_batch(single, BATCHES))
    finally:
        shutil.rmtree(sources[0].parent)
    return B * T / mixture_s / 1e6, B * T / single_s / 1e6


def state_bytes(data_dir: Path, tokenizer, n_sources: int) -> int:
    """The largest JSON state over 20 batches of an n-source mixture (weights 1..n), crop="requeue"."""
    sources = split_sources(data_dir, n_sources)
    try:
        loader = bestfit(tokenizer, crop="requeue",
                         sources=[{"data_dir": str(d), "weight": 1 + i} for i, d in enumerate(sources)])
        return max(len(json.dumps(next(loader)[2])) for _ in range(20))
    finally:
        shutil.rmtree(sources[0].parent)


def main():
    data_dir = number_corpus(80_000, files=8)
    try:
        for label, as_arrays in [("docs as arrays", True), ("docs as int lists", False)]:
            mixture, single = throughput(data_dir, LookupTokenizer(as_arrays=as_arrays))
            name = "loader_mixture_packing_throughput" + ("" if as_arrays else "_with_int_conversion")
            print(f"{name}: measured {mixture:.1f} Mtok/s (2 sources, 1:1) | reference {single:.1f} Mtok/s "
                  f"(one data_dir, same shards) | ratio {mixture / single:.2f}x (goal >= 0.9x)  [{label}]", flush=True)
        for n_sources, limit in STATE_LIMITS.items():
            size = state_bytes(data_dir, LookupTokenizer(as_arrays=True), n_sources)
            print(f"loader_mixture_state_size_{n_sources}_sources: measured {size / 1024:.1f} KB | reference "
                  f"(limit) {limit // 1024} KB | ratio {size / limit:.2f} (goal <= 1)  [buffer {BUFFER}, "
                  f"crop=requeue]", flush=True)
    finally:
        shutil.rmtree(data_dir)


if __name__ == "__main__":
    main()
