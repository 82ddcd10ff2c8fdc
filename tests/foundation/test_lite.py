"""nanodata.lite.DataLoaderLite: build-nanogpt batching, rank layout, shard wrap, exact resume."""

import json

import numpy as np
import pytest
import torch

from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite
from nanodata.pretokenize import pretokenize


@pytest.fixture
def shard_dir(tmp_path):
    """A val shard and 3 train shards whose tokens encode (shard, position): token = 10000*shard + pos."""
    sizes = {0: 500, 1: 1000, 2: 700, 3: 430}
    for i, n in sizes.items():
        split = "val" if i == 0 else "train"
        dtype = np.uint16 if i < 3 else np.uint32  # the loader reads both
        np.save(tmp_path / f"tok_{split}_{i:06d}.npy", (10000 * i + np.arange(n)).astype(dtype))
    (tmp_path / "tok_train_000004.npy.tmp").write_bytes(b"partial")
    return tmp_path


class ReferenceLoader:
    """build-nanogpt's DataLoaderLite, single process, as published (eager int64 shard in memory)."""

    def __init__(self, B, T, shards):
        self.B, self.T, self.shards = B, T, shards
        self.shard, self.tokens, self.pos = 0, torch.tensor(np.load(shards[0]).astype(np.int64)), 0

    def next_batch(self):
        B, T = self.B, self.T
        buf = self.tokens[self.pos:self.pos + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        self.pos += B * T
        if self.pos + (B * T + 1) > len(self.tokens):
            self.shard = (self.shard + 1) % len(self.shards)
            self.tokens, self.pos = torch.tensor(np.load(self.shards[self.shard]).astype(np.int64)), 0
        return x, y


def test_matches_build_nanogpt_single_process(shard_dir):
    loader = DataLoaderLite(B=2, T=16, process_rank=0, num_processes=1, split="train", data_root=shard_dir)
    ref = ReferenceLoader(2, 16, sorted(shard_dir.glob("tok_train_*.npy")))
    for _ in range(200):  # several epochs over 3 shards
        (x, y), (rx, ry) = loader.next_batch(), ref.next_batch()
        assert x.dtype == torch.int64 and x.shape == (2, 16)
        assert torch.equal(x, rx) and torch.equal(y, ry)


def test_ranks_interleave_and_switch_shards_together(shard_dir):
    B, T, W = 2, 8, 3
    loaders = [DataLoaderLite(B, T, r, W, "train", shard_dir) for r in range(W)]
    for step in range(60):
        xs = [ld.next_batch() for ld in loaders]
        starts = [int(x[0, 0]) for x, _ in xs]
        shards = {s // 10000 for s in starts}
        assert len(shards) == 1  # every rank reads the same shard at every step
        assert [s - starts[0] for s in starts] == [B * T * r for r in range(W)]  # rank offset B*T*r
        for x, y in xs:
            flat = x.flatten()
            assert torch.equal(flat, torch.arange(flat[0], flat[0] + B * T))  # contiguous tokens
            assert torch.equal(y.flatten(), flat + 1)  # y is x shifted by one


def test_advance_and_wrap_positions(shard_dir):
    B, T, W = 4, 10, 2  # step = 80 tokens: shard 1 (1000) gives 12 steps, shard 2 (700) 8, shard 3 (430) 5
    loader = DataLoaderLite(B, T, 1, W, "train", shard_dir)
    starts = [int(loader.next_batch()[0][0, 0]) for _ in range(26)]
    expected = ([10000 + 40 + 80 * k for k in range(12)] + [20000 + 40 + 80 * k for k in range(8)]
                + [30000 + 40 + 80 * k for k in range(5)] + [10040])
    assert starts == expected


def test_val_split_and_reset(shard_dir):
    loader = DataLoaderLite(1, 8, 0, 1, "val", shard_dir)
    first = loader.next_batch()
    loader.next_batch()
    loader.reset()
    assert torch.equal(loader.next_batch()[0], first[0]) and int(first[0][0, 0]) == 0


def test_state_dict_resumes_exactly_across_shard_boundaries(shard_dir):
    B, T, W = 3, 7, 2
    for rank in range(W):
        original = DataLoaderLite(B, T, rank, W, "train", shard_dir)
        for _ in range(21):
            original.next_batch()
        state = json.loads(json.dumps(original.state_dict()))  # plain data, checkpoint-friendly
        resumed = DataLoaderLite(B, T, rank, W, "train", shard_dir)
        resumed.load_state_dict(state)
        for _ in range(80):
            (x, y), (rx, ry) = original.next_batch(), resumed.next_batch()
            assert torch.equal(x, rx) and torch.equal(y, ry)


def test_state_dict_rejects_other_geometry(shard_dir):
    state = DataLoaderLite(2, 8, 0, 1, "train", shard_dir).state_dict()
    with pytest.raises(NanodataError, match="cannot resume: state has B=2"):
        DataLoaderLite(4, 8, 0, 1, "train", shard_dir).load_state_dict(state)


def test_short_last_shard_is_skipped_not_crashing(shard_dir):
    loader = DataLoaderLite(8, 64, 0, 1, "train", shard_dir)  # step 512+1: shard 3 (430 tokens) is too short
    shards = [int(loader.next_batch()[0][0, 0]) // 10000 for _ in range(6)]
    assert shards == [1, 2, 1, 2, 1, 2]


def test_errors(shard_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NanodataError, match="no \\*_train_NNNNNN.npy"):
        DataLoaderLite(1, 8, 0, 1, "train", tmp_path / "empty")
    with pytest.raises(NanodataError, match="does not exist"):
        DataLoaderLite(1, 8, 0, 1, "train", tmp_path / "missing")
    with pytest.raises(NanodataError, match="lower B or T"):
        DataLoaderLite(16, 1024, 0, 1, "train", shard_dir)
    with pytest.raises(NanodataError, match="process_rank"):
        DataLoaderLite(1, 8, 2, 2, "train", shard_dir)
    with pytest.raises(NanodataError, match="split must be"):
        DataLoaderLite(1, 8, 0, 1, "test", shard_dir)


def test_reads_pretokenize_output(corpus_dir, tmp_path, tokenizer):
    meta = pretokenize(corpus_dir, "cl100k_base", tmp_path / "tok", shard_tokens=20_000, workers=2, progress=False)
    loader = DataLoaderLite(4, 32, 0, 1, "val", tmp_path / "tok")
    x, y = loader.next_batch()
    assert int(x[0, 0]) == tokenizer.get_bos_token_id()
    assert torch.equal(x.flatten()[1:], y.flatten()[:-1])
    train = DataLoaderLite(4, 32, 0, 1, "train", tmp_path / "tok")
    assert len(train.shards) == len(meta["shards"]) - 1 and train.next_batch()[0].max() < tokenizer.n_vocab
