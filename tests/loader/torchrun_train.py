"""Run by test_torchrun.py under `torchrun --standalone --nproc_per_node=2`: each rank trains a tiny DDP model
(gloo) from the best-fit loader, checkpoints model, optimizer and its own loader state at --checkpoint-at, and
writes its per-step losses, a digest of each step's batch and its final weights. With --resume it starts from that
checkpoint instead. --device cuda puts the model and the batches on the GPU (tests/cuda; both ranks may share one GPU:
gloo reduces CUDA tensors too), with deterministic kernels so a resumed run's losses can equal the uninterrupted one's."""

import argparse
import hashlib
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit
from nanodata.tokenizer import load

VOCAB = 512  # tokens are folded into a tiny vocabulary: the model only has to be trainable, not good


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--checkpoint-at", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()
    if args.device == "cuda":
        torch.use_deterministic_algorithms(True)  # with CUBLAS_WORKSPACE_CONFIG set by the caller

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = Path(args.out_dir)
    checkpoint_path = out / f"checkpoint_rank{rank}.pt"
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))
                                    .to(args.device))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    start, loader_state = 0, None
    if args.resume:
        checkpoint = torch.load(checkpoint_path, map_location=args.device)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        start, loader_state = checkpoint["step"], json.loads(checkpoint["loader"])

    # rank and world size come from torch.distributed; the state is this rank's own
    loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        load("cl100k_base"), 2, 32, "train", tokenizer_batch_size=16, device=args.device, resume_state_dict=loader_state,
        buffer_size=50, data_dir=args.data_dir, prefetch=2)
    losses, batches = {}, {}
    for step in range(start, args.steps):
        inputs, targets, state = next(loader)
        assert inputs.device.type == args.device
        batches[step + 1] = hashlib.sha256(inputs.cpu().numpy().tobytes() + targets.cpu().numpy().tobytes()).hexdigest()
        logits = model(inputs % VOCAB)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), (targets % VOCAB).view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses[step + 1] = loss.item()
        if step + 1 == args.checkpoint_at:
            tmp = checkpoint_path.with_suffix(".tmp")
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1,
                        "loader": json.dumps(state)}, tmp)
            os.replace(tmp, checkpoint_path)
    torch.save({k: v.cpu() for k, v in model.module.state_dict().items()}, out / f"{args.tag}_weights_rank{rank}.pt")
    (out / f"{args.tag}_batches_rank{rank}.json").write_text(json.dumps(batches))
    (out / f"{args.tag}_losses_rank{rank}.json").write_text(json.dumps(losses))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
