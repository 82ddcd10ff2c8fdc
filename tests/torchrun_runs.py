"""A real two-process torchrun of tests/loader/torchrun_train.py: train, checkpoint at step 4, resume in a new
torchrun to step 8, and check the resumed run matches the uninterrupted one exactly (batches, losses, weights) on
both ranks. Shared by tests/loader (device cpu) and tests/cuda (device cuda)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).parent / "loader" / "torchrun_train.py"


def torchrun(data_dir, out_dir, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
               "--data-dir", str(data_dir), "--out-dir", str(out_dir), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]


def checkpoint_and_resume(data_dir, out_dir, device: str) -> list[dict]:
    """Both runs on `device`; returns each rank's per-step batch digests of the uninterrupted run."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    torchrun(data_dir, out_dir, "--tag", "full", "--steps", "8", "--checkpoint-at", "4", "--device", device)
    torchrun(data_dir, out_dir, "--tag", "resumed", "--steps", "8", "--resume", "--device", device)
    out, digests = Path(out_dir), []
    for rank in range(2):
        for kind in ("losses", "batches"):
            full = json.loads((out / f"full_{kind}_rank{rank}.json").read_text())
            resumed = json.loads((out / f"resumed_{kind}_rank{rank}.json").read_text())
            assert list(resumed) == ["5", "6", "7", "8"]
            assert resumed == {step: full[step] for step in resumed}, f"rank {rank}: {kind} differ after the resume"
        full_weights = torch.load(out / f"full_weights_rank{rank}.pt")
        resumed_weights = torch.load(out / f"resumed_weights_rank{rank}.pt")
        assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
        digests.append(json.loads((out / f"full_batches_rank{rank}.json").read_text()))
    losses = [json.loads((out / f"full_losses_rank{rank}.json").read_text()) for rank in range(2)]
    assert losses[0] != losses[1]  # the ranks trained on different documents
    return digests
