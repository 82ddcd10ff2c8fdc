"""End to end with the real tokenizer (cl100k_base, 2 threads): nanodata's best-fit loader vs bare
`encode_ordinary_batch` on the same docs, and the published loader on the same docs. Goal >= 0.85x of bare
tokenization throughput, i.e. reading, packing, slicing and copying cost under 15%. Wall time, best of rounds."""

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from loader_bench_common import WORDS, published_loader, write_parquet
from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit
from nanodata.tokenizer import load

B, T, BUFFER, THREADS, BATCHES, ROUNDS = 16, 2048, 1000, 2, 40, 3


def make_corpus(n_docs: int) -> tuple[Path, list[str]]:
    rng = np.random.default_rng(0)
    words = np.array([*WORDS, *(w.capitalize() + "," for w in WORDS), "1999.", "(42)", "\n\n"])
    texts = [" ".join(rng.choice(words, size=int(n))) for n in np.minimum(rng.lognormal(5.6, 0.9, n_docs), 6000)]
    data_dir = Path(tempfile.mkdtemp(prefix="nanodata_bench_"))
    half = n_docs // 2
    write_parquet(data_dir / "shard_00000.parquet", texts[:half], row_group_size=1024)
    write_parquet(data_dir / "shard_00001.parquet", texts[half:], row_group_size=1024)
    write_parquet(data_dir / "shard_00002.parquet", ["val"], row_group_size=1024)
    return data_dir, texts


class Counting:
    """The real tokenizer, counting the docs the published loader asks it to encode (it reads nothing ahead)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.docs = tokenizer, 0

    def get_bos_token_id(self):
        return self.tokenizer.get_bos_token_id()

    def encode(self, texts, prepend=None, num_threads=8):
        self.docs += len(texts)
        return self.tokenizer.encode(texts, prepend=prepend, num_threads=num_threads)


def timed_ours(tokenizer, data_dir, docs_per_file):
    """Seconds for BATCHES batches and the docs they consumed (from the state's cursor: read-ahead excluded)."""
    loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, "train", tokenizer_threads=THREADS, device="cpu", buffer_size=BUFFER, data_dir=data_dir,
        prefetch=2)
    started = time.perf_counter()
    for _ in range(BATCHES):
        _, _, state = next(loader)
    seconds = time.perf_counter() - started
    loader.close()
    time.sleep(0.5)  # let the prefetch threads see the close and stop before anything else is timed
    epoch, file_idx, rg_idx, row = state["cursor"]
    assert epoch == 1, "the corpus must be larger than what the run consumes"
    return seconds, file_idx * docs_per_file + rg_idx * 1024 + row


def timed_published(tokenizer, data_dir):
    counting = Counting(tokenizer)
    loader = published_loader.bestfit_loader(counting, B, T, "train", data_dir, buffer_size=BUFFER,
                                             tokenizer_threads=THREADS)
    started = time.perf_counter()
    for _ in range(BATCHES):
        next(loader)
    return time.perf_counter() - started, counting.docs


def timed_bare(tokenizer, texts):
    started = time.perf_counter()
    for i in range(0, len(texts), 128):
        tokenizer.encoding.encode_ordinary_batch(texts[i:i + 128], num_threads=THREADS)
    return time.perf_counter() - started


def main():
    tokenizer = load("cl100k_base")
    n_docs = 12_000
    data_dir, texts = make_corpus(n_docs)
    try:
        ours_rate, bare_rate, published_rate = 0.0, 0.0, 0.0
        for _ in range(ROUNDS):  # docs/s, each the best of the rounds
            seconds, docs = timed_ours(tokenizer, data_dir, n_docs // 2)
            ours_rate = max(ours_rate, docs / seconds)
            bare_rate = max(bare_rate, docs / timed_bare(tokenizer, texts[:docs]))
            seconds, docs = timed_published(tokenizer, data_dir)
            published_rate = max(published_rate, docs / seconds)
    finally:
        shutil.rmtree(data_dir)
    print(f"loader_end_to_end_throughput: measured {ours_rate:.0f} docs/s | reference (bare encode_ordinary_batch) "
          f"{bare_rate:.0f} docs/s | ratio {ours_rate / bare_rate:.2f}x (goal >= 0.85x)")
    print(f"loader_end_to_end_vs_published: measured {ours_rate:.0f} docs/s | reference (published loader) "
          f"{published_rate:.0f} docs/s | ratio {ours_rate / published_rate:.2f}x")


if __name__ == "__main__":
    main()
