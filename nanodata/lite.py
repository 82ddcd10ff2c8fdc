"""DataLoaderLite: (B, T) batches from .npy token shards (build-nanogpt), plus exact resume.

Rank r of W reads B*T+1 tokens at offset B*T*r, then every rank advances by B*T*W. When the
next step would read past the shard end, all ranks move to the next shard (wrapping to the
first) and restart at their rank offset. y is x shifted by one token.

Unlike build-nanogpt, the shard switch is decided on the whole step (the last rank's read), so
all ranks switch shards at the same step; shards are memory-mapped and only each batch is
converted to int64; and `state_dict()` / `load_state_dict()` resume exactly.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import numpy as np
import torch

from nanodata.errors import NanodataError

log = logging.getLogger(__name__)


def list_shards(data_root: str | os.PathLike, split: str) -> list[Path]:
    """PREFIX_{split}_NNNNNN.npy files in data_root, sorted by name (partials end in .tmp)."""
    pattern = re.compile(rf".+_{split}_\d+\.npy")
    data_root = Path(data_root)
    if not data_root.is_dir():
        raise NanodataError(f"data_root {data_root} does not exist")
    return sorted(p for p in data_root.iterdir() if pattern.fullmatch(p.name))


def load_tokens(path: Path) -> np.ndarray:
    try:
        tokens = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise NanodataError(f"{path}: not a readable .npy token shard ({exc})") from None
    if tokens.ndim != 1 or tokens.dtype.kind not in "ui":
        raise NanodataError(f"{path}: expected a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    return tokens


class DataLoaderLite:
    def __init__(self, B: int, T: int, process_rank: int, num_processes: int, split: str,
                 data_root: str | os.PathLike):
        if split not in ("train", "val"):
            raise NanodataError(f"split must be 'train' or 'val', not {split!r}")
        if B < 1 or T < 1 or num_processes < 1 or not 0 <= process_rank < num_processes:
            raise NanodataError(f"need B, T, num_processes >= 1 and 0 <= process_rank < num_processes; "
                                f"got B={B} T={T} process_rank={process_rank} num_processes={num_processes}")
        self.B, self.T = B, T
        self.process_rank, self.num_processes = process_rank, num_processes
        self.split = split
        self.step_tokens = B * T * num_processes
        self.shards = list_shards(data_root, split)
        if not self.shards:
            raise NanodataError(f"{data_root}: no *_{split}_NNNNNN.npy token shards (run 'nanodata pretokenize')")
        log.debug("found %d shards for split %s", len(self.shards), split)
        self.reset()

    def reset(self) -> None:
        self._load_shard(0)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        B, T = self.B, self.T
        buf = torch.from_numpy(self.tokens[self.current_position:self.current_position + B * T + 1].astype(np.int64))
        x = buf[:-1].view(B, T)
        y = buf[1:].view(B, T)
        self.current_position += self.step_tokens
        if self._step_start() + self.step_tokens + 1 > len(self.tokens):
            self._load_shard((self.current_shard + 1) % len(self.shards))
        return x, y

    def state_dict(self) -> dict:
        """Where the next batch comes from; load_state_dict() on a fresh loader continues exactly."""
        return {"split": self.split, "B": self.B, "T": self.T, "process_rank": self.process_rank,
                "num_processes": self.num_processes, "shards": [p.name for p in self.shards],
                "current_shard": self.current_shard, "current_position": self.current_position}

    def load_state_dict(self, state: dict) -> None:
        mine = self.state_dict()
        for key in ("split", "B", "T", "process_rank", "num_processes", "shards"):
            if state[key] != mine[key]:
                raise NanodataError(f"cannot resume: state has {key}={state[key]!r}, this loader {mine[key]!r}")
        self._load_shard(state["current_shard"])
        self.current_position = state["current_position"]

    def _step_start(self) -> int:
        return self.current_position - self.B * self.T * self.process_rank

    def _load_shard(self, index: int) -> None:
        """Load shard `index`, or the next one that holds a full step (a short final shard is skipped)."""
        for offset in range(len(self.shards)):
            candidate = (index + offset) % len(self.shards)
            tokens = load_tokens(self.shards[candidate])
            if len(tokens) >= self.step_tokens + 1:
                break
            log.warning("%s: %d tokens, fewer than one step (B*T*num_processes+1 = %d); skipped",
                        self.shards[candidate].name, len(tokens), self.step_tokens + 1)
        else:
            raise NanodataError(f"no {self.split} shard holds one step of B*T*num_processes+1 = "
                                f"{self.step_tokens + 1} tokens; lower B or T")
        self.current_shard, self.tokens = candidate, tokens
        self.current_position = self.B * self.T * self.process_rank
