"""DataLoaderLite: (B, T) batches from .npy token shards (build-nanogpt), plus exact resume.

Rank r of W reads B*T+1 tokens at offset B*T*r, then every rank advances by B*T*W. When the
next step would read past the shard end, all ranks move to the next shard (wrapping to the
first) and restart at their rank offset. y is x shifted by one token.

Unlike build-nanogpt, the shard switch is decided on the whole step (the last rank's read), so
all ranks switch shards at the same step; shards are memory-mapped and only each batch is
converted to int64; and `state_dict()` / `load_state_dict()` resume exactly.

Only a finished `nanodata pretokenize` output loads: its meta.json must list exactly the shard
files present, with their sizes (checked at every start; `verify=True` also checks every shard's
sha256). A resume state records what its positions mean (shard fingerprint, tokenizer, B, T,
ranks, split) and is refused, naming the field, when any of it differs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch

from nanodata.errors import NanodataError, check_path
from nanodata.ranges import BATCH_ROWS, SEQ_LEN, WORLD_SIZE
from nanodata.token_shards import SHARD_FILE, committed_meta

log = logging.getLogger(__name__)

STATE_VERSION = 2  # 1 was the unversioned state that named shards only
# every key of a state and its type; bool is not an int here (True == 1 would pass a comparison)
STATE_TYPES = {"version": int, "split": str, "B": int, "T": int, "process_rank": int, "num_processes": int,
               "tokenizer": str, "shards": str, "current_shard": int, "current_position": int}
MUST_MATCH = ("version", "split", "B", "T", "process_rank", "num_processes", "tokenizer", "shards")


def load_tokens(path: Path) -> np.ndarray:
    try:
        tokens = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        raise NanodataError(f"{path}: not a readable .npy token shard ({exc})") from None
    if tokens.ndim != 1 or tokens.dtype.kind not in "ui":
        raise NanodataError(f"{path}: expected a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    return tokens


def fingerprint(shards: list[dict]) -> str:
    """A short digest of shard records (name, size, sha256 from meta.json): equal only for the same bytes."""
    key = json.dumps([[s["name"], s["bytes"], s["sha256"]] for s in shards])
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _short(value) -> str:
    """repr for a one-line message, cut: a hand-edited state may hold anything."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class DataLoaderLite:
    def __init__(self, B: int, T: int, process_rank: int, num_processes: int, split: str,
                 data_root: str | os.PathLike, verify: bool = False):
        if split not in ("train", "val"):
            raise NanodataError(f"split must be 'train' or 'val', not {split!r}")
        BATCH_ROWS.check("B", B)
        SEQ_LEN.check("T", T)
        WORLD_SIZE.check("num_processes", num_processes)
        check_path("data_root", data_root)
        if isinstance(process_rank, bool) or not isinstance(process_rank, int) or not 0 <= process_rank < num_processes:
            raise NanodataError(f"need B, T, num_processes >= 1 and 0 <= process_rank < num_processes; "
                                f"got B={B} T={T} process_rank={process_rank} num_processes={num_processes}")
        self.B, self.T = B, T
        self.process_rank, self.num_processes = process_rank, num_processes
        self.split = split
        self.step_tokens = B * T * num_processes
        meta = committed_meta(data_root, verify)
        records = [s for s in meta["shards"] if SHARD_FILE.fullmatch(s["name"]).group(1) == split]
        if not records:
            raise NanodataError(f"{data_root}: meta.json lists no {split} shards (*_{split}_NNNNNN.npy)")
        self.shards = [Path(data_root) / s["name"] for s in records]
        self.tokenizer, self.fingerprint = meta["tokenizer_identity"], fingerprint(records)
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
        """Where the next batch comes from, and what that depends on; load_state_dict() on a fresh loader
        over the same shards continues exactly."""
        return {"version": STATE_VERSION, "split": self.split, "B": self.B, "T": self.T,
                "process_rank": self.process_rank, "num_processes": self.num_processes,
                "tokenizer": self.tokenizer, "shards": self.fingerprint,
                "current_shard": self.current_shard, "current_position": self.current_position}

    def load_state_dict(self, state: dict) -> None:
        """Resume from state_dict(); a state from other shards, tokenizer, geometry or ranks, or a malformed
        one, is a NanodataError naming the key (and both values)."""
        if not isinstance(state, dict):
            raise NanodataError(f"cannot resume: the state is a {type(state).__name__}, not a dict")
        for key, kind in STATE_TYPES.items():
            if key not in state:
                raise NanodataError(f"cannot resume: the state has no {key!r}")
            if type(state[key]) is not kind:
                raise NanodataError(f"cannot resume: state {key}={_short(state[key])} is a "
                                    f"{type(state[key]).__name__}, not {kind.__name__}")
        mine = self.state_dict()
        for key in MUST_MATCH:
            if state[key] != mine[key]:
                raise NanodataError(f"cannot resume: state has {key}={_short(state[key])}, this loader {mine[key]!r}")
        self._seek(state["current_shard"], state["current_position"])

    def _seek(self, shard: int, position: int) -> None:
        """Go to a position next_batch() could have reached: a step start of this rank, a full step in the shard."""
        if not 0 <= shard < len(self.shards):
            raise NanodataError(f"cannot resume: state current_shard={shard} is out of range: "
                                f"{len(self.shards)} {self.split} shards")
        tokens = load_tokens(self.shards[shard])
        start = position - self.B * self.T * self.process_rank
        if start < 0 or start % self.step_tokens or start + self.step_tokens + 1 > len(tokens):
            raise NanodataError(f"cannot resume: state current_position={position} is not a step start of rank "
                                f"{self.process_rank} in current_shard={shard} ({self.shards[shard].name}: "
                                f"{len(tokens)} tokens, steps of {self.step_tokens})")
        self.current_shard, self.tokens, self.current_position = shard, tokens, position

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
