"""A real two-process torchrun (gloo): train, checkpoint, resume in a new torchrun; the resumed run matches the
uninterrupted one exactly (losses and weights), on both ranks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).with_name("torchrun_train.py")


def _torchrun(data_dir, out_dir, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(SCRIPT),
               "--data-dir", str(data_dir), "--out-dir", str(out_dir), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]


def test_two_ranks_checkpoint_and_resume_exactly(corpus_dir, tmp_path):
    _torchrun(corpus_dir, tmp_path, "--tag", "full", "--steps", "8", "--checkpoint-at", "4")
    _torchrun(corpus_dir, tmp_path, "--tag", "resumed", "--steps", "8", "--resume")
    for rank in range(2):
        full = json.loads((tmp_path / f"full_losses_rank{rank}.json").read_text())
        resumed = json.loads((tmp_path / f"resumed_losses_rank{rank}.json").read_text())
        assert list(resumed) == ["5", "6", "7", "8"]
        assert resumed == {step: full[step] for step in resumed}
        full_weights = torch.load(tmp_path / f"full_weights_rank{rank}.pt")
        resumed_weights = torch.load(tmp_path / f"resumed_weights_rank{rank}.pt")
        assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
    losses = [json.loads((tmp_path / f"full_losses_rank{rank}.json").read_text()) for rank in range(2)]
    assert losses[0] != losses[1]  # the ranks trained on different documents
