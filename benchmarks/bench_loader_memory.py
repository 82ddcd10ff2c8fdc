"""Resident memory over 2,000 batches (several epochs of a small corpus, lookup tokenizer, prefetch on):
nanodata's best-fit loader vs the published loader, same process, same data. Goal: flat, growth <= 16 MB
after the first 100 batches (the buffer fill and first allocations)."""

import gc
import shutil

from loader_bench_common import LookupTokenizer, number_corpus, published_loader, rss_mb

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit

B, T, BUFFER, BATCHES, WARMUP = 8, 2048, 1000, 2000, 100


def growth_mb(loader) -> tuple[float, float]:
    """(RSS after warm-up, growth from there to the end) in MB."""
    for _ in range(WARMUP):
        next(loader)
    gc.collect()
    start = rss_mb()
    for _ in range(BATCHES - WARMUP):
        next(loader)
    gc.collect()
    return start, rss_mb() - start


def main():
    data_dir = number_corpus(8_000)  # ~1.5 epochs per 1,000 batches: epoch wraps are part of the run
    tokenizer = LookupTokenizer()
    try:
        ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
            tokenizer, B, T, "train", device="cpu", buffer_size=BUFFER, data_dir=data_dir, prefetch=2)
        ours_start, ours_growth = growth_mb(ours)
        epochs = next(ours)[2]["epoch"]
        ours.close()
        reference_start, reference_growth = growth_mb(
            published_loader.bestfit_loader(tokenizer, B, T, "train", data_dir, buffer_size=BUFFER))
    finally:
        shutil.rmtree(data_dir)
    print(f"loader_memory_growth: measured {ours_growth:+.1f} MB | reference (published loader) "
          f"{reference_growth:+.1f} MB | over {BATCHES} batches, {epochs} epochs, RSS after warm-up "
          f"{ours_start:.0f} MB (goal <= 16 MB growth)")


if __name__ == "__main__":
    main()
