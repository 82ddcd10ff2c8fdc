"""Exact resume: the state yielded with batch k restarts at batch k+1, bit-identical, JSON round-tripped,
at many k including epoch boundaries, after two consecutive resumes, with prefetch on and off."""

import json

import published_loader
import pytest
import torch
from batches import take
from loader_helpers import small_bestfit, small_concat, write_small_corpus

from nanodata.loader import (
    tokenizing_distributed_data_loader_with_state,
    tokenizing_distributed_data_loader_with_state_bos_bestfit,
)

N = 60


_bestfit, _concat = small_bestfit, small_concat
LOADERS = {"bestfit": _bestfit, "requeue": lambda *a, **k: _bestfit(*a, crop="requeue", **k), "concat": _concat}


def _assert_continues(resumed, full, k, n):
    for j, (inputs, targets, state) in enumerate(take(resumed, n), start=k + 1):
        assert torch.equal(inputs, full[j][0]) and torch.equal(targets, full[j][1]), f"batch {j} after resume at {k}"
        assert state == full[j][2]


@pytest.mark.parametrize("kind", LOADERS)
@pytest.mark.parametrize("prefetch", [0, 3])
def test_resume_at_many_k(tokenizer, tmp_path, kind, prefetch):
    small_corpus = write_small_corpus(tmp_path)
    make = LOADERS[kind]
    full = take(make(tokenizer, small_corpus, prefetch=prefetch), N)
    epoch_starts = [k for k in range(1, N) if full[k][2]["epoch"] != full[k - 1][2]["epoch"]]
    assert epoch_starts, "the run must cross an epoch boundary"
    ks = {0, 1, 2, 5, 13, N - 8} | {k + d for k in epoch_starts for d in (-2, -1, 0)}
    for k in sorted(ks):
        resumed = make(tokenizer, small_corpus, prefetch=prefetch, resume_state_dict=json.loads(json.dumps(full[k][2])))
        _assert_continues(resumed, full, k, min(4, N - 1 - k))


@pytest.mark.parametrize("kind", LOADERS)
def test_double_resume_with_prefetch_switching(tokenizer, tmp_path, kind):
    small_corpus = write_small_corpus(tmp_path)
    make = LOADERS[kind]
    full = take(make(tokenizer, small_corpus, prefetch=0), N)
    first = take(make(tokenizer, small_corpus, prefetch=2, resume_state_dict=full[10][2]), 15)  # batches 11..25
    second = make(tokenizer, small_corpus, prefetch=0, resume_state_dict=first[-1][2])
    _assert_continues(second, full, 25, N - 26)


def test_requeued_tails_survive_resume(tokenizer, tmp_path):
    small_corpus = write_small_corpus(tmp_path)
    full = take(_bestfit(tokenizer, small_corpus, crop="requeue", prefetch=0), N)
    with_tails = [k for k in range(N - 3) if any(len(doc_id) == 4 for doc_id in full[k][2]["buffer"])]
    assert with_tails
    for k in with_tails[:5]:
        resumed = _bestfit(tokenizer, small_corpus, crop="requeue", prefetch=0, resume_state_dict=full[k][2])
        _assert_continues(resumed, full, k, 2)


def test_state_is_small_at_default_buffer(tokenizer, corpus_dir):
    loader = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, 4, 256, "train", device="cpu", data_dir=corpus_dir, crop="requeue", prefetch=0)
    for _, _, state in take(loader, 10):
        assert len(state["buffer"]) >= 1000
        assert len(json.dumps(state)) <= 64 * 1024


@pytest.mark.parametrize("kind", ["bestfit", "concat"])
def test_nanochat_state_resumes_at_next_row_group_stride(tokenizer, corpus_dir, kind):
    nanochat_state = {"pq_idx": 1, "rg_idx": 0, "epoch": 1}
    if kind == "bestfit":
        ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
            tokenizer, 2, 64, "train", tokenizer_batch_size=16, device="cpu", buffer_size=40, data_dir=corpus_dir,
            rank=1, world_size=2, resume_state_dict=nanochat_state, prefetch=0)
        reference = published_loader.bestfit_loader(tokenizer, 2, 64, "train", corpus_dir, 1, 2, 16, 40,
                                                    resume_state_dict=nanochat_state)
    else:
        ours = tokenizing_distributed_data_loader_with_state(
            tokenizer, 2, 64, "train", tokenizer_batch_size=16, device="cpu", data_dir=corpus_dir, rank=1,
            world_size=2, resume_state_dict=nanochat_state, prefetch=0)
        reference = published_loader.concat_loader(tokenizer, 2, 64, "train", corpus_dir, 1, 2, 16,
                                                   resume_state_dict=nanochat_state)
    for k in range(20):
        inputs, targets, state = next(ours)
        ref_inputs, ref_targets, ref_state = next(reference)
        assert torch.equal(inputs, ref_inputs) and torch.equal(targets, ref_targets), f"batch {k}"
        assert (state["pq_idx"], state["rg_idx"], state["epoch"]) == tuple(ref_state.values())
        if k == 0:  # the skipped stride: rank 1 of 2 goes on at row group (0 // 2 + 1) * 2 + 1 = 3
            assert (state["pq_idx"], state["rg_idx"]) == (1, 3)


@pytest.mark.parametrize("rank,world_size,match", [(1, 2, "saved with rank=0, this loader has rank=1"),
                                                    (0, 3, "saved with world_size=2, this loader has world_size=3")])
def test_state_from_another_rank_or_world_size_is_refused(tokenizer, corpus_dir, rank, world_size, match):
    state = take(_bestfit(tokenizer, corpus_dir, rank=0, world_size=2, prefetch=0), 3)[-1][2]
    with pytest.raises(ValueError, match=match):
        _bestfit(tokenizer, corpus_dir, rank=rank, world_size=world_size, resume_state_dict=state)


def test_nanochat_fields_of_a_state_resume_at_another_world_size(tokenizer, corpus_dir):
    state = take(_bestfit(tokenizer, corpus_dir, rank=0, world_size=2, prefetch=0), 3)[-1][2]
    nanochat_state = {key: state[key] for key in ("pq_idx", "rg_idx", "epoch")}
    rank1 = _bestfit(tokenizer, corpus_dir, rank=1, world_size=3, prefetch=0, resume_state_dict=nanochat_state)
    _, _, resumed_state = next(rank1)
    assert resumed_state["rg_idx"] % 3 == 1 and resumed_state["rg_idx"] > state["rg_idx"]


def test_state_of_the_other_loader_kind_is_rejected(tokenizer, tmp_path):
    small_corpus = write_small_corpus(tmp_path)
    state = take(_concat(tokenizer, small_corpus, prefetch=0), 1)[0][2]
    with pytest.raises(ValueError, match="concat"):
        _bestfit(tokenizer, small_corpus, resume_state_dict=state)
