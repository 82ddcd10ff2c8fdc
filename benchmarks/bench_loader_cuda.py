"""The loader on a CUDA GPU: is it ever the bottleneck of a training step? (`make bench-cuda` on a GPU machine)

Two figures, each beside its reference in the same run:
  1. delivery: batches/s of the best-fit loader to device="cuda" vs to device="cpu" (same loader, same corpus, the
     lookup tokenizer, so packing plus delivery is measured, not tokenizing); goal >= 0.9x.
  2. a real training step: a GPT-style decoder (causal attention, bf16 autocast, AdamW) at B=16, T=2048 fed by the
     loader with the real cl100k_base tokenizer over real text (tokenized in the loader's threads) vs the same steps
     on one batch already on the GPU; goal: step time ratio <= 1.05x (the loader's work hides behind the GPU's);
     and the loader alone (no model) in tokens/s beside the step's demand: its headroom.
On a machine without CUDA it says so and measures nothing (`make bench` on CPU machines).
"""

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from loader_bench_common import LookupTokenizer, number_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit

B, T, BUFFER = 32, 2048, 1000
BATCHES, ROUNDS = 300, 5
STEP_B, LAYERS, WIDTH, HEADS = 16, 8, 1024, 8
STEPS, WARMUP = 40, 10


def main():
    if not torch.cuda.is_available():
        print("loader_cuda: skipped: no CUDA device here (run `make bench-cuda` on a GPU machine)")
        return
    hardware = torch.cuda.get_device_name()
    delivery(hardware)
    training_step(hardware)


def delivery(hardware: str):
    tokenizer = LookupTokenizer(as_arrays=True)
    data_dir = number_corpus(60_000)

    def run(device):
        with bestfit(tokenizer, B, T, "train", device=device, buffer_size=BUFFER, data_dir=data_dir,
                     prefetch=2) as batches:
            for _ in range(BATCHES):
                next(batches)
            torch.cuda.synchronize()

    best = {"cpu": float("inf"), "cuda": float("inf")}
    try:
        for _ in range(ROUNDS):  # interleaved: other work on the machine falls on both alike
            for device in best:
                started = time.perf_counter()
                run(device)
                best[device] = min(best[device], time.perf_counter() - started)
    finally:
        shutil.rmtree(data_dir)
    per_s = {device: BATCHES / seconds for device, seconds in best.items()}
    print(f"loader_cuda_batches_per_s: measured device=cuda {per_s['cuda']:.1f} batches/s | reference device=cpu "
          f"{per_s['cpu']:.1f} batches/s | ratio {per_s['cuda'] / per_s['cpu']:.2f}x (goal >= 0.9x) "
          f"[B={B} T={T}, best of {ROUNDS} x {BATCHES} batches, {hardware}]", flush=True)


class Decoder(torch.nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, WIDTH)
        layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.blocks = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = torch.nn.Linear(WIDTH, vocab, bias=False)

    def forward(self, inputs, targets):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(inputs.shape[1], device=inputs.device)
        hidden = self.blocks(self.embed(inputs), mask=mask, is_causal=True)
        logits = self.head(hidden)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def training_step(hardware: str):
    from corpus import write_corpus

    from nanodata.tokenizer import load

    tokenizer = load("cl100k_base")
    data_dir = Path(tempfile.mkdtemp(prefix="nanodata_bench_"))
    write_corpus(data_dir, n_files=5, docs_per_file=4000, row_group_size=1024)
    model = Decoder(tokenizer.get_vocab_size()).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def step(inputs, targets):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def timed(next_batch) -> float:
        """Median wall time of a step (the next batch fetched inside it, as a training loop does), after warmup."""
        times = []
        for k in range(WARMUP + STEPS):
            torch.cuda.synchronize()
            started = time.perf_counter()
            inputs, targets = next_batch()
            step(inputs, targets)
            torch.cuda.synchronize()
            if k >= WARMUP:
                times.append(time.perf_counter() - started)
        return statistics.median(times)

    try:
        with bestfit(tokenizer, STEP_B, T, "train", device="cuda", data_dir=data_dir) as batches:
            fixed = next(batches)[:2]
            static = timed(lambda: fixed)
            fed = timed(lambda: next(batches)[:2])
            static_again = timed(lambda: fixed)  # the reference on both sides of the measured run
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(STEPS):
                next(batches)
            torch.cuda.synchronize()
            alone = (time.perf_counter() - started) / STEPS
    finally:
        shutil.rmtree(data_dir)
    reference = min(static, static_again)
    tokens = STEP_B * T
    print(f"loader_cuda_training_step: measured with the loader {fed * 1e3:.1f} ms/step | reference one batch "
          f"already on the GPU {reference * 1e3:.1f} ms/step | ratio {fed / reference:.3f}x (goal <= 1.05x) | "
          f"{tokens / fed:,.0f} tokens/s fed [B={STEP_B} T={T}, {LAYERS} layers x {WIDTH}, bf16, cl100k_base "
          f"tokenized in the loader, median of {STEPS} steps, {hardware}]", flush=True)
    print(f"loader_cuda_headroom: measured the loader alone {tokens / alone:,.0f} tokens/s | reference the step's "
          f"demand {tokens / reference:,.0f} tokens/s | ratio {reference / alone:.1f}x headroom [same loader, "
          f"{STEPS} batches, tokenizer_threads=4]", flush=True)


if __name__ == "__main__":
    main()
