"""Run by test_ranks.py as `python xla_replicas.py DATA_DIR OUT_DIR N` with PJRT_DEVICE=CPU, CPU_NUM_DEVICES=2:
torch_xla.launch starts one replica per XLA device; each builds the best-fit loader on device="xla" without a
rank or world size (so the loader asks the XLA runtime) and saves its first N batches, on the host, and states."""

import sys
from pathlib import Path

import torch
import torch_xla
import torch_xla.runtime as xr
from xla_helpers import SMALL, B, T

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit
from nanodata.tokenizer import load


def replica(index: int, data_dir: str, out_dir: str, n: int) -> None:
    loader = bestfit(load("cl100k_base"), B, T, "train", device="xla", data_dir=data_dir, **SMALL)
    batches = []
    for _ in range(n):
        inputs, targets, state = next(loader)
        assert inputs.device == torch_xla.device()  # this replica's own device
        batches.append((inputs.cpu(), targets.cpu(), state))
    torch.save({"index": index, "ordinal": xr.global_ordinal(), "world_size": xr.world_size(), "batches": batches},
               Path(out_dir) / f"replica{index}.pt")


if __name__ == "__main__":
    torch_xla.launch(replica, args=(sys.argv[1], sys.argv[2], int(sys.argv[3])))
