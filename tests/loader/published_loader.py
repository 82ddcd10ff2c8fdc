"""A plain implementation of the published nanochat loaders (DESIGN.md "Best-fit packing"), written for
clarity, not speed: the oracle for the tests and the baseline for benchmarks/bench_loader_*.py.

Files: sorted *.parquet, train = all but the last. Linear scans over a Python list buffer, as published.
"""

from pathlib import Path

import pyarrow.parquet as pq
import torch


def document_batches(data_dir, split, rank, world_size, tokenizer_batch_size, resume_state_dict=None):
    paths = sorted(p for p in Path(data_dir).iterdir() if p.suffix == ".parquet")
    paths = paths[:-1] if split == "train" else paths[-1:]
    resume = resume_state_dict
    epoch = resume.get("epoch", 1) if resume else 1
    first_pass = True
    while True:
        pq_idx = resume["pq_idx"] if (first_pass and resume) else 0
        while pq_idx < len(paths):
            pf = pq.ParquetFile(paths[pq_idx])
            rg_idx = rank
            if first_pass and resume and pq_idx == resume["pq_idx"]:
                rg_idx = (resume["rg_idx"] // world_size + 1) * world_size + rank
                resume = None
            while rg_idx < pf.num_row_groups:
                texts = pf.read_row_group(rg_idx).column("text").to_pylist()
                for i in range(0, len(texts), tokenizer_batch_size):
                    yield texts[i:i + tokenizer_batch_size], (pq_idx, rg_idx, epoch)
                rg_idx += world_size
            pq_idx += 1
        first_pass = False
        epoch += 1


def bestfit_loader(tokenizer, B, T, split, data_dir, rank=0, world_size=1, tokenizer_batch_size=128,
                   buffer_size=1000, resume_state_dict=None, tokenizer_threads=4, requeue=False):
    """requeue=True is nanodata's extension: a cropped doc's tail goes to the end of the buffer behind a BOS."""
    batches = document_batches(data_dir, split, rank, world_size, tokenizer_batch_size, resume_state_dict)
    bos = tokenizer.get_bos_token_id()
    buffer = []
    position = (0, 0, 1)
    while True:
        rows = torch.empty((B, T + 1), dtype=torch.long)
        for r in range(B):
            pos = 0
            while pos < T + 1:
                while len(buffer) < buffer_size:
                    texts, position = next(batches)
                    buffer.extend(tokenizer.encode(texts, prepend=bos, num_threads=tokenizer_threads))
                remaining = T + 1 - pos
                best, best_len = -1, 0
                for i, doc in enumerate(buffer):
                    if best_len < len(doc) <= remaining:
                        best, best_len = i, len(doc)
                if best >= 0:
                    doc = buffer.pop(best)
                    rows[r, pos:pos + len(doc)] = torch.tensor(doc, dtype=torch.long)
                    pos += len(doc)
                else:
                    shortest = min(range(len(buffer)), key=lambda i: len(buffer[i]))
                    doc = buffer.pop(shortest)
                    rows[r, pos:] = torch.tensor(doc[:remaining], dtype=torch.long)
                    pos = T + 1
                    if requeue:
                        buffer.append([bos] + doc[remaining:])
        pq_idx, rg_idx, epoch = position
        yield rows[:, :-1], rows[:, 1:], {"pq_idx": pq_idx, "rg_idx": rg_idx, "epoch": epoch}


def concat_loader(tokenizer, B, T, split, data_dir, rank=0, world_size=1, tokenizer_batch_size=128,
                  resume_state_dict=None, tokenizer_threads=4):
    batches = document_batches(data_dir, split, rank, world_size, tokenizer_batch_size, resume_state_dict)
    bos = tokenizer.get_bos_token_id()
    stream = []
    position = (0, 0, 1)
    while True:
        while len(stream) < B * T + 1:
            texts, position = next(batches)
            for tokens in tokenizer.encode(texts, prepend=bos, num_threads=tokenizer_threads):
                stream.extend(tokens)
        window = torch.tensor(stream[:B * T + 1], dtype=torch.long)
        stream = stream[B * T:]
        pq_idx, rg_idx, epoch = position
        yield window[:-1].view(B, T), window[1:].view(B, T), {"pq_idx": pq_idx, "rg_idx": rg_idx, "epoch": epoch}
