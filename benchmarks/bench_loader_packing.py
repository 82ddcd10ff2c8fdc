"""Packing alone (tokenizer replaced by a lookup of pre-tokenized docs), B=32, T=2048, buffer 1000:
nanodata's best-fit packer vs the published pure-Python packer, same process, same data. Goal >= 10x.

Measured in CPU time of this thread (both run in it) and best of interleaved rounds, so that other work on a
shared machine does not decide the ratio. Docs as numpy arrays isolate the packing; docs as lists of Python ints
(what a tokenizer returns) add the int conversion that every loader pays for every token it places.
"""

import shutil
import time

import torch
from loader_bench_common import LookupTokenizer, doc_lengths, number_corpus, published_loader

from nanodata.loader import simulate_crop_fraction, tokenizing_distributed_data_loader_with_state_bos_bestfit

B, T, BUFFER = 32, 2048, 1000
ROUNDS = 3


def seconds_per_batch(loader, n):
    started = time.thread_time()
    for _ in range(n):
        next(loader)
    return (time.thread_time() - started) / n


def compare(data_dir, tokenizer):
    ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, "train", device="cpu", buffer_size=BUFFER, data_dir=data_dir, prefetch=0)
    reference = published_loader.bestfit_loader(tokenizer, B, T, "train", data_dir, buffer_size=BUFFER)
    for k in range(3):  # same algorithm: the batches must agree before speed means anything
        assert torch.equal(next(ours)[0], next(reference)[0]), f"batch {k} differs from the published loader"
    ours_s = min(seconds_per_batch(ours, 100) for _ in range(ROUNDS))
    reference_s = min(seconds_per_batch(reference, 8) for _ in range(ROUNDS))
    return B * T / ours_s / 1e6, B * T / reference_s / 1e6


def main():
    data_dir = number_corpus(50_000)
    try:
        for label, as_arrays, goal in [("docs as arrays", True, " (goal >= 10x)"), ("docs as int lists", False, "")]:
            ours, reference = compare(data_dir, LookupTokenizer(as_arrays=as_arrays))
            name = "loader_packing_throughput" + ("" if as_arrays else "_with_int_conversion")
            print(f"{name}: measured {ours:.1f} Mtok/s | reference {reference:.2f} Mtok/s | "
                  f"ratio {ours / reference:.1f}x{goal}  [{label}]", flush=True)
    finally:
        shutil.rmtree(data_dir)
    lengths = doc_lengths(20_000, seed=1)
    floor = sum(max(0, n + 1 - (T + 1)) for n in lengths) / sum(n + 1 for n in lengths)
    for crop in ("discard", "requeue"):
        print(f"loader_crop_fraction_{crop}: {simulate_crop_fraction(lengths, T, BUFFER, crop=crop):.1%} of tokens "
              f"cropped at T={T} (floor: {floor:.1%} beyond T+1 inside long docs)")


if __name__ == "__main__":
    main()
