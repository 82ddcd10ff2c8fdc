"""The default loader is the published algorithm, batch for batch: compared element by element with the plain
implementation in published_loader.py over several (B, T, buffer_size, world_size, tokenizer_batch_size)."""

import random

import numpy as np
import published_loader
import pytest
import torch
from loader_helpers import write_small_corpus

from nanodata.loader import (
    simulate_crop_fraction,
    tokenizing_distributed_data_loader_with_state,
    tokenizing_distributed_data_loader_with_state_bos_bestfit,
)
from nanodata.loader.packing import LengthSet

SETTINGS = [  # B, T, buffer_size, world_size, tokenizer_batch_size
    (2, 16, 8, 1, 4),
    (3, 64, 50, 2, 16),
    (4, 128, 1000, 1, 128),
    (1, 7, 1, 3, 1),
    (8, 32, 200, 4, 32),
]


def _same_batches(ours, reference, n):
    states = []
    for k in range(n):
        inputs, targets, state = next(ours)
        ref_inputs, ref_targets, ref_state = next(reference)
        assert torch.equal(inputs, ref_inputs), f"inputs differ at batch {k}"
        assert torch.equal(targets, ref_targets), f"targets differ at batch {k}"
        assert (state["pq_idx"], state["rg_idx"], state["epoch"]) == tuple(ref_state.values())
        states.append(state)
    return states


@pytest.mark.parametrize("B,T,buffer_size,world_size,batch_size", SETTINGS)
def test_bestfit_matches_published(tokenizer, corpus_dir, B, T, buffer_size, world_size, batch_size):
    epochs = set()
    for rank in range(world_size):
        ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
            tokenizer, B, T, "train", tokenizer_batch_size=batch_size, device="cpu", buffer_size=buffer_size,
            data_dir=corpus_dir, rank=rank, world_size=world_size, prefetch=rank % 2)
        reference = published_loader.bestfit_loader(tokenizer, B, T, "train", corpus_dir, rank, world_size,
                                                    batch_size, buffer_size)
        epochs.add(_same_batches(ours, reference, 40)[-1]["epoch"])
    if buffer_size == 1000:  # 900 train docs: the buffer alone spans an epoch boundary
        assert max(epochs) >= 2


@pytest.mark.parametrize("B,T,buffer_size", [(2, 16, 8), (3, 64, 50)])
def test_requeue_matches_reference_and_keeps_every_token(tokenizer, tmp_path, B, T, buffer_size):
    small_corpus = write_small_corpus(tmp_path)
    ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, "train", tokenizer_batch_size=8, device="cpu", buffer_size=buffer_size,
        data_dir=small_corpus, crop="requeue", prefetch=0)
    reference = published_loader.bestfit_loader(tokenizer, B, T, "train", small_corpus, 0, 1, 8, buffer_size,
                                                requeue=True)
    states = _same_batches(ours, reference, 30)
    assert any(len(doc_id) == 4 for state in states for doc_id in state["buffer"])  # tails were requeued
    bos = tokenizer.get_bos_token_id()
    ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
        tokenizer, B, T, "train", tokenizer_batch_size=8, device="cpu", buffer_size=buffer_size,
        data_dir=small_corpus, crop="requeue", prefetch=0)
    non_bos = sum(int((inputs[:, :1] != bos).sum()) for inputs, *_ in (next(ours) for _ in range(5)))
    assert non_bos == 0  # every row starts with BOS


@pytest.mark.parametrize("B,T,world_size", [(2, 16, 1), (3, 50, 2), (1, 5, 3)])
def test_concatenation_matches_published(tokenizer, corpus_dir, B, T, world_size):
    for rank in range(world_size):
        ours = tokenizing_distributed_data_loader_with_state(
            tokenizer, B, T, "train", tokenizer_batch_size=16, device="cpu", data_dir=corpus_dir, rank=rank,
            world_size=world_size, prefetch=1)
        reference = published_loader.concat_loader(tokenizer, B, T, "train", corpus_dir, rank, world_size, 16)
        _same_batches(ours, reference, 40)


def test_length_set_matches_brute_force():
    rng = random.Random(0)
    n = 300
    lengths, members = LengthSet(n), set()
    for _ in range(5000):
        x = rng.randint(1, n)
        if x in members:
            lengths.discard(x)
            members.remove(x)
        else:
            lengths.add(x)
            members.add(x)
        limit = rng.randint(1, n)
        assert lengths.largest_at_most(limit) == max((m for m in members if m <= limit), default=0)
        assert lengths.smallest() == min(members, default=0)


def _brute_force_crop_fraction(doc_lengths, T, buffer_size, slice_size=128):
    docs = [n + 1 for n in doc_lengths]
    buffer, cropped, next_doc = [], 0, 0
    while True:
        pos = 0
        while pos < T + 1:
            while len(buffer) < buffer_size and next_doc < len(docs):
                buffer += docs[next_doc:next_doc + slice_size]
                next_doc += slice_size
            if not buffer:
                return cropped / sum(docs)
            remaining = T + 1 - pos
            fits = [n for n in buffer if n <= remaining]
            if fits:
                buffer.remove(max(fits))
                pos += max(fits)
            else:
                cropped += buffer.pop(buffer.index(min(buffer))) - remaining
                pos = T + 1


def test_simulate_crop_fraction_matches_brute_force():
    rng = np.random.default_rng(0)
    doc_lengths = rng.lognormal(5.5, 1.2, size=3000).astype(int)
    for T, buffer_size in [(256, 50), (1024, 300)]:
        fraction = simulate_crop_fraction(doc_lengths, T, buffer_size=buffer_size)
        assert fraction == _brute_force_crop_fraction(list(doc_lengths), T, buffer_size)
        assert 0 < fraction < 1
        assert simulate_crop_fraction(doc_lengths, T, buffer_size=buffer_size, crop="requeue") == 0.0
    assert simulate_crop_fraction([], 16) == 0.0
