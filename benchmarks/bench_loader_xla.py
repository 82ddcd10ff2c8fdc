"""Batches per second delivered to an XLA device vs to the CPU device, same loader, same corpus; goal >= 0.9x.

B=32, T=2048 (nanochat's), buffer 1000, the lookup tokenizer (pre-tokenized docs as arrays), so what is measured
is packing plus delivery, not tokenizing. Three ways to the device, each with torch_xla's CompileTime count:
  - device="cpu": the reference (one host copy into a new batch tensor);
  - device="xla": the loader hands each batch to the XLA runtime (PJRT) itself;
  - device="cpu" under torch_xla's MpDeviceLoader, which transfers in its own thread, batches ahead.
Wall time (the transfer runs partly in PJRT's threads), the best of interleaved rounds, each ending when the last
batch is on the device (xm.wait_device_ops); at torch's default intra-op threads, then at 1: torch_xla copies each
host tensor with torch's thread pool, whose threads spin-wait for each other when the cores are busy with other
work (as on this shared 2-core machine), a 1 MB transfer then taking ~10 ms instead of ~0.4 ms. Needs torch_xla: `make bench-xla` (PJRT_DEVICE=CPU, .venv-xla); under
`make bench` (no torch_xla) it says so and measures nothing. On PJRT CPU the "device" is host memory: this
shows the loader adds no per-batch cost and no compiles on the XLA path, not a TPU's host-to-HBM bandwidth.
"""

import os
import shutil
import time
from itertools import islice

import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from loader_bench_common import LookupTokenizer, number_corpus  # noqa: E402

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit  # noqa: E402

B, T, BUFFER = 32, 2048, 1000
BATCHES, ROUNDS = 300, 5


def main():
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        from torch_xla.distributed.parallel_loader import MpDeviceLoader
    except ImportError:
        print("loader_xla_batches_per_s: skipped: torch_xla is not installed here (run `make bench-xla`)")
        return

    def compiles():
        data = met.metric_data("CompileTime")
        return data[0] if data else 0

    device = torch_xla.device()
    tokenizer = LookupTokenizer(as_arrays=True)
    data_dir = number_corpus(60_000)

    def loader(on):
        return bestfit(tokenizer, B, T, "train", device=on, buffer_size=BUFFER, data_dir=data_dir, prefetch=2)

    def run_cpu():
        batches = loader("cpu")
        for _ in range(BATCHES):
            next(batches)
        batches.close()

    def run_xla():
        batches = loader("xla")
        for _ in range(BATCHES):
            next(batches)
        xm.wait_device_ops()
        batches.close()

    def run_mp():
        batches = loader("cpu")
        wrapped = MpDeviceLoader(batches, device)
        for _ in islice(iter(wrapped), BATCHES):
            pass
        xm.wait_device_ops()
        wrapped._parallel_loader.close()  # joins its threads (MpDeviceLoader has no close of its own)
        batches.close()

    ways = {"cpu": run_cpu, "xla": run_xla, "mp_device_loader": run_mp}
    try:
        for threads in sorted({torch.get_num_threads(), 1}, reverse=True):
            torch.set_num_threads(threads)
            measure(ways, compiles, threads, xm.xla_device_hw(device))
    finally:
        shutil.rmtree(data_dir)


def measure(ways, compiles, threads, hardware):
    best = {name: float("inf") for name in ways}
    compiled = dict.fromkeys(ways, 0)
    for _ in range(ROUNDS):  # interleaved: load from other work on the machine falls on every way alike
        for name, run in ways.items():
            before, started = compiles(), time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - started)
            compiled[name] += compiles() - before
    per_s = {name: BATCHES / seconds for name, seconds in best.items()}
    for name in ("xla", "mp_device_loader"):
        print(f"loader_xla_batches_per_s[{name}]: measured {per_s[name]:.1f} batches/s | reference device=cpu "
              f"{per_s['cpu']:.1f} batches/s | ratio {per_s[name] / per_s['cpu']:.2f}x (goal >= 0.9x) | "
              f"CompileTime {compiled[name]} over {ROUNDS * BATCHES} batches  [B={B} T={T}, {hardware} via PJRT, "
              f"torch intra-op threads {threads}]", flush=True)


if __name__ == "__main__":
    main()
