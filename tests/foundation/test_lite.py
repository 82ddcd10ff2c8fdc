"""nanodata.lite.DataLoaderLite: build-nanogpt batching, rank layout, shard wrap, exact resume."""

import json

import numpy as np
import pytest
import torch

from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite
from nanodata.pipeline.pretokenize import pretokenize, shard_record, write_meta
from nanodata.token_shards import META_VERSION


def write_shards(root, sizes, offset=0, identity="test-tokenizer"):
    """Shards whose tokens encode (shard, position): token = offset + 10000*shard + pos, committed by a meta.json."""
    root.mkdir(parents=True, exist_ok=True)
    records = []
    for i, n in sizes.items():
        split = "val" if i == 0 else "train"
        dtype = np.uint16 if i < 3 else np.uint32  # the loader reads both
        path = root / f"tok_{split}_{i:06d}.npy"
        np.save(path, (offset + 10000 * i + np.arange(n)).astype(dtype))
        records.append(shard_record(path, split, n))
    write_meta(root, {"version": META_VERSION, "tokenizer_identity": identity, "shards": records})
    return root


@pytest.fixture
def shard_dir(tmp_path):
    """A val shard and 3 train shards, and a killed run's temp file (never read)."""
    write_shards(tmp_path, {0: 500, 1: 1000, 2: 700, 3: 430})
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
    for _ in range(60):
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
    with pytest.raises(NanodataError, match="empty: no meta.json"):
        DataLoaderLite(1, 8, 0, 1, "train", tmp_path / "empty")
    val_only = write_shards(tmp_path / "empty", {0: 500})
    with pytest.raises(NanodataError, match="lists no train shards"):
        DataLoaderLite(1, 8, 0, 1, "train", val_only)
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


def refusal(data_root, **kwargs) -> str:
    with pytest.raises(NanodataError) as info:
        DataLoaderLite(1, 8, 0, 1, "train", data_root, **kwargs)
    message = str(info.value)
    assert "\n" not in message and "re-run 'nanodata pretokenize'" in message
    return message


def test_only_a_committed_shard_set_loads(shard_dir):
    """meta.json is the commit: shards without it, or not matching it, are refused with one line."""
    meta = shard_dir / "meta.json"
    committed = meta.read_bytes()
    meta.unlink()  # a killed or failed run: final-named shards, no meta.json
    assert "no meta.json" in refusal(shard_dir)
    meta.write_bytes(committed)
    (shard_dir / "tok_train_000009.npy").write_bytes((shard_dir / "tok_train_000001.npy").read_bytes())
    assert "tok_train_000009.npy: a shard not in meta.json" in refusal(shard_dir)  # another run's shard
    (shard_dir / "tok_train_000009.npy").unlink()
    shard = shard_dir / "tok_train_000002.npy"
    good = shard.read_bytes()
    shard.write_bytes(good[:-6])
    assert f"tok_train_000002.npy: {len(good) - 6} bytes, meta.json says {len(good)}" in refusal(shard_dir)
    shard.unlink()
    assert "tok_train_000002.npy: listed in meta.json but missing" in refusal(shard_dir)
    shard.write_bytes(good[:-2] + bytes([good[-2] ^ 1]) + good[-1:])  # same size, other bytes
    DataLoaderLite(1, 8, 0, 1, "train", shard_dir)  # names and sizes only at every start
    assert "tok_train_000002.npy: sha256 differs from meta.json" in refusal(shard_dir, verify=True)
    good_meta = json.loads(committed)
    for bad in ("{", "[]", '{"version": 1, "shards": []}',
                json.dumps({**good_meta, "shards": good_meta["shards"] + [dict(good_meta["shards"][0], name="x.npy")]}),
                json.dumps({**good_meta, "shards": good_meta["shards"] + good_meta["shards"][:1]})):
        meta.write_text(bad)
        refusal(shard_dir)


def test_state_from_other_shards_or_tokenizer_is_refused(tmp_path):
    sizes = {0: 500, 1: 1000, 2: 700}
    state = DataLoaderLite(2, 8, 0, 1, "train", write_shards(tmp_path / "a", sizes)).state_dict()
    # same names and sizes, other tokens: positions in it would mean other batches
    other_corpus = DataLoaderLite(2, 8, 0, 1, "train", write_shards(tmp_path / "b", sizes, offset=5))
    with pytest.raises(NanodataError, match=f"cannot resume: state has shards='{state['shards']}', this loader '"):
        other_corpus.load_state_dict(state)
    other_tokenizer = DataLoaderLite(2, 8, 0, 1, "train", write_shards(tmp_path / "c", sizes, identity="other"))
    with pytest.raises(NanodataError, match="cannot resume: state has tokenizer='test-tokenizer', this loader 'other'"):
        other_tokenizer.load_state_dict(state)


def test_malformed_state_names_the_key(shard_dir):
    loader = DataLoaderLite(2, 8, 1, 2, "train", shard_dir)
    good = loader.state_dict()
    cases = {"current_position": "the state has no 'current_position'",
             "B": "state B='2' is a str, not int",
             "current_shard": "state current_shard=7 is out of range: 3 train shards"}
    for key, message in cases.items():
        state = dict(good)
        if key == "current_position":
            del state[key]
        else:
            state[key] = {"B": "2", "current_shard": 7}[key]
        with pytest.raises(NanodataError, match=f"^cannot resume: {message}"):
            loader.load_state_dict(state)
    with pytest.raises(NanodataError, match="current_position=17 is not a step start of rank 1"):
        loader.load_state_dict({**good, "current_position": 17})
    with pytest.raises(NanodataError, match="state process_rank=True is a bool, not int"):
        loader.load_state_dict({**good, "process_rank": True})
