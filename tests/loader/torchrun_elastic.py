"""Run by test_torchrun_elastic.py under `torchrun --standalone --nproc_per_node=W`: each rank reads marker corpora
(one data_dir, or a mixture) with logical streams, takes --steps batches or, with --until-epoch, batches until
every source of every logical stream of every rank has reached that epoch, then gathers all ranks' states with
gather_states (gloo). Writes its rows (B x T+1 per batch) as <tag>_rows_rank<r>.npy; rank 0 writes the gathered
states as <tag>_states.json. With --resume it starts from such a file, at whatever world size it runs on."""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))  # torchrun runs this file as a script: markers.py is beside it
from markers import MarkerTokenizer  # noqa: E402

from nanodata.loader import gather_states, tokenizing_distributed_data_loader_with_state_bos_bestfit  # noqa: E402

B, T, LOGICAL_STREAMS = 3, 24, 6


def elastic_loader(data_dirs, weights, resume=None, **kwargs):
    """Small sizes so that an epoch passes in a few dozen batches: a buffer of 10 docs, slices of 4; read ahead."""
    where = ({"data_dir": data_dirs[0]} if weights is None else
             {"sources": [{"data_dir": str(d), "weight": w} for d, w in zip(data_dirs, weights, strict=False)]})
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(
        MarkerTokenizer(), B, T, "train", tokenizer_batch_size=4, device="cpu", resume_state_dict=resume,
        buffer_size=10, logical_streams=LOGICAL_STREAMS, prefetch=2, **where, **kwargs)


def lowest_epoch(state: dict) -> int:
    return min(source["cursor"][0] for part in state["streams"] for source in part["sources"])


def take(loader, steps=None, until_epoch=None, everywhere=lambda epoch: epoch):
    """Rows and last state of `steps` batches, or of batches until `everywhere(this rank's lowest epoch)` (the
    lowest over all ranks, so that they all take as many batches) reaches until_epoch."""
    rows, taken = [], 0
    while True:
        inputs, targets, state = next(loader)
        rows.append(torch.cat([inputs, targets[:, -1:]], dim=1).numpy())
        taken += 1
        if taken == steps or (until_epoch is not None and everywhere(lowest_epoch(state)) >= until_epoch):
            return np.concatenate(rows), json.loads(json.dumps(state))


def _lowest_everywhere(epoch: int) -> int:
    value = torch.tensor([epoch])
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", action="append", required=True)
    parser.add_argument("--weight", action="append", type=float, help="one per --data-dir: a mixture")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--resume", help="a <tag>_states.json written by an earlier run")
    until = parser.add_mutually_exclusive_group(required=True)
    until.add_argument("--steps", type=int)
    until.add_argument("--until-epoch", type=int)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), Path(args.out_dir)
    resume = json.loads(Path(args.resume).read_text()) if args.resume else None
    loader = elastic_loader(args.data_dir, args.weight, resume)  # rank and world size from torch.distributed
    rows, state = take(loader, args.steps, args.until_epoch, _lowest_everywhere)
    np.save(out / f"{args.tag}_rows_rank{rank}.npy", rows)
    states = gather_states(state)
    if rank == 0:
        (out / f"{args.tag}_states.json").write_text(json.dumps(states))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
