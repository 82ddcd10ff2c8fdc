"""Smoke training on an XLA device: a tiny GPT-like model, 50 steps, fed by nanodata's best-fit loader.

    PJRT_DEVICE=CPU python scripts/train_xla_smoke.py [--data-dir DIR] [--tokenizer SPEC] [--out result.json]

On a TPU VM leave PJRT_DEVICE=TPU (the default there). Without --data-dir it writes a small synthetic corpus
(sentences from a little grammar, so there is something to learn) and trains a 512-token BPE on it with
nanodata's trainer; with --data-dir it reads that corpus (parquet with a `text` column, the last file val) with
--tokenizer (a `nanodata tokenizer train` directory or a tiktoken name).

It checks, and exits 1 unless all hold:
  - the loss falls (the mean of the last 5 steps below 0.8x the first step's);
  - the loader state saved at --resume-at restores into a new loader whose next batches equal the run's own;
  - every batch has one shape and dtype, and the step stops compiling after warm-up (torch_xla's CompileTime).
The figures are printed and written to --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit_loader
from nanodata.tokenizer import load

WARMUP = 3  # steps that may compile: the step itself, then the optimizer's first update of its state


def write_corpus(data_dir: Path, files: int = 4, docs: int = 150, seed: int = 0) -> Path:
    """`files` parquet shards (the last is val) of short documents of grammatical sentences."""
    subjects = ["the loader", "a rank", "the packer", "each shard", "the tokenizer", "a worker", "the trainer"]
    verbs = ["reads", "packs", "writes", "streams", "checks", "resumes", "skips"]
    objects = ["row groups", "documents", "tokens", "a batch", "the buffer", "its state", "the next file"]
    rng = random.Random(seed)
    for i in range(files):
        texts = [" ".join(f"{rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(objects)}."
                          for _ in range(rng.randint(2, 30))) for _ in range(docs)]
        pq.write_table(pa.table({"text": texts}), data_dir / f"shard_{i:05d}.parquet", row_group_size=32)
    return data_dir


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, T: int, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(T, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2
        for module in self.modules():  # GPT-2's small init: N(0, 1) embeddings would start the loss near 40
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def compile_count() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, help="a parquet corpus; default: a synthetic one in a temp dir")
    parser.add_argument("--tokenizer", help="with --data-dir: a tokenizer directory or tiktoken name")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--resume-at", type=int, default=25, help="save the loader state after this step")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = parser.parse_args(argv)
    if not 0 < args.resume_at < args.steps:
        parser.error("--resume-at must be between 0 and --steps")

    import torch_xla  # here, not at the top: --help works without it

    B, T = args.batch_size, args.seq_len
    with tempfile.TemporaryDirectory(prefix="nanodata_xla_smoke_") as tmp:
        if args.data_dir is None:
            data_dir = write_corpus(Path(tmp))
            from nanodata.pipeline.tokenizer_train import train_tokenizer

            tokenizer = load(train_tokenizer(data_dir, 512, Path(tmp) / "tokenizer", progress=False))
        else:
            data_dir, tokenizer = args.data_dir, load(args.tokenizer or "cl100k_base")
        return train(args, data_dir, tokenizer, B, T, torch_xla)


def train(args, data_dir, tokenizer, B: int, T: int, torch_xla) -> int:
    device = torch_xla.device()
    torch.manual_seed(0)
    model = TinyGPT(tokenizer.n_vocab, T).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)

    def loader(resume=None):
        return bestfit_loader(tokenizer, B, T, "train", device="xla", data_dir=data_dir, resume_state_dict=resume,
                              tokenizer_batch_size=32, buffer_size=100)

    batches, losses, saved, after_warmup = loader(), [], None, None
    later = []  # the batches after the save, on the host, to compare with the restored loader's
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        inputs, targets, state = next(batches)
        if (inputs.shape, inputs.dtype, targets.shape, targets.dtype) != ((B, T), torch.long, (B, T), torch.long):
            print(f"step {step}: batch of {tuple(inputs.shape)} {inputs.dtype}, not ({B}, {T}) int64")
            return 1
        if saved is not None:
            later.append((inputs.cpu(), targets.cpu()))
        loss = model(inputs, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # one graph per step
        losses.append(loss)  # fetched at the end: reading it now would wait for the device every step
        if step == WARMUP:
            after_warmup = compile_count()
        if step == args.resume_at:
            saved = json.loads(json.dumps(state))  # as a checkpoint stores it
    losses = [float(loss.item()) for loss in losses]
    seconds = time.perf_counter() - started

    restored = loader(saved)
    same = all(torch.equal(x.cpu(), a) and torch.equal(y.cpu(), b)
               for (a, b), (x, y, _) in zip(later, (next(restored) for _ in later), strict=False))
    first, last = losses[0], sum(losses[-5:]) / 5
    result = {"steps": args.steps, "B": B, "T": T, "vocab": tokenizer.n_vocab, "first_loss": first,
              "last5_loss": last, "loss_fell": last < 0.8 * first and math.isfinite(last),
              "resume_at": args.resume_at, "restored_batches_equal": same, "compiles_after_warmup": after_warmup,
              "compiles_at_end": compile_count(), "seconds": round(seconds, 2), "losses": losses}
    result["no_recompiles"] = result["compiles_after_warmup"] == result["compiles_at_end"]
    print(f"loss {first:.3f} -> {last:.3f} (mean of the last 5) over {args.steps} steps in {seconds:.1f} s; "
          f"restored loader's {len(later)} batches after step {args.resume_at} equal: {same}; CompileTime "
          f"{after_warmup} after {WARMUP} steps, {result['compiles_at_end']} at the end")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0 if result["loss_fell"] and same and result["no_recompiles"] else 1


if __name__ == "__main__":
    sys.exit(main())
