"""Elastic resume in one process (each rank a loader with an explicit rank): the list of all ranks' states resumes
on another world size with every document of the epoch used exactly once, checked with per-document markers;
logical streams at N = W are nanochat's batches; the same world size resumes bit-identically; too many ranks,
incomplete lists and single states at another world size are refused in one line."""

import json

import numpy as np
import published_loader
import pytest
import torch
from batches import as_json, take
from markers import MarkerTokenizer, check_each_document_used_once, write_marker_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit

B, T = 3, 24


@pytest.fixture
def marker_dirs(tmp_path):
    """Two marker corpora: 3 train files of 48 docs in row groups of 4 (12 per file), a smaller one of 24 docs."""
    return [write_marker_corpus(tmp_path / "a", first=0), write_marker_corpus(tmp_path / "b", first=10_000, seed=1,
                                                                               docs_per_file=24)]


def _loader(data_dirs, rank, world_size, weights=None, **kwargs):
    kwargs = {"tokenizer_batch_size": 4, "buffer_size": 10, "device": "cpu", "prefetch": 0, **kwargs}
    if weights is None:
        kwargs["data_dir"] = data_dirs[0]
    else:
        kwargs["sources"] = [{"data_dir": str(d), "weight": w} for d, w in zip(data_dirs, weights, strict=False)]
    return tokenizing_distributed_data_loader_with_state_bos_bestfit(MarkerTokenizer(), B, T, "train", rank=rank,
                                                                     world_size=world_size, **kwargs)


def _run(data_dirs, world_size, steps, resume=None, **kwargs):
    """Every rank's rows (B x T+1 each, all ranks and steps) and the states of the last step, in rank order."""
    loaders = [_loader(data_dirs, rank, world_size, resume_state_dict=resume, **kwargs) for rank in range(world_size)]
    rows, states = [], [None] * world_size
    for _ in range(steps):
        for rank, loader in enumerate(loaders):
            inputs, targets, state = next(loader)
            rows.append(torch.cat([inputs, targets[:, -1:]], dim=1).numpy())
            states[rank] = as_json(state)
    return np.concatenate(rows), states


def _elastic_runs(data_dirs, worlds, steps, **kwargs):
    """Runs at worlds[0], then resumed from all ranks' states at worlds[1], ...; all rows and the final states."""
    rows, states = _run(data_dirs, worlds[0], steps[0], **kwargs)
    all_rows = [rows]
    for world_size, n in zip(worlds[1:], steps[1:], strict=False):
        rows, states = _run(data_dirs, world_size, n, resume=states, **kwargs)
        all_rows.append(rows)
    return np.concatenate(all_rows), states


@pytest.mark.parametrize("worlds", [(2, 1), (2, 3), (2, 6), (4, 5), (2, 3, 1)])
@pytest.mark.parametrize("crop", ["discard", "requeue"])
def test_elastic_resume_uses_every_document_once(marker_dirs, worlds, crop):
    steps = [12] + [72 // world_size for world_size in worlds[1:]]
    rows, states = _elastic_runs(marker_dirs, worlds, steps, logical_streams=6, crop=crop)
    assert {state["world_size"] for state in states} == {worlds[-1]}
    assert check_each_document_used_once(rows, states, marker_dirs[:1], crop) >= 2  # past an epoch boundary


@pytest.mark.parametrize("worlds", [(2, 1), (2, 3), (3, 2, 6)])
def test_elastic_resume_of_a_mixture_uses_every_document_once(marker_dirs, worlds):
    steps = [10] + [60 // world_size for world_size in worlds[1:]]
    rows, states = _elastic_runs(marker_dirs, worlds, steps, logical_streams=6, weights=[2, 1])
    assert check_each_document_used_once(rows, states, marker_dirs, "discard") >= 2


def test_a_default_run_resumes_on_fewer_ranks(marker_dirs):
    rows, states = _elastic_runs(marker_dirs, (3, 2, 1), (8, 20, 30))
    assert check_each_document_used_once(rows, states, marker_dirs[:1]) >= 2
    assert states[0]["version"] == 3 and states[0]["logical_streams"] == 3  # its streams are its first ranks


def test_a_default_run_on_more_ranks_is_refused_naming_logical_streams(marker_dirs):
    _, states = _run(marker_dirs, 2, 3)
    with pytest.raises(ValueError, match=r"world_size=3 is more than the saved run's logical_streams=2: .*start a "
                                         r"run with logical_streams >= 3") as failure:
        _loader(marker_dirs, 0, 3, resume_state_dict=states)
    assert "\n" not in str(failure.value)
    _, states = _run(marker_dirs, 2, 3, logical_streams=4)
    with pytest.raises(ValueError, match="world_size=5 is more than the saved run's logical_streams=4"):
        _loader(marker_dirs, 0, 5, resume_state_dict=states)
    with pytest.raises(ValueError, match="world_size=5 is more than this run's logical_streams=4"):
        _loader(marker_dirs, 0, 5, logical_streams=4)


@pytest.mark.parametrize("kwargs", [{}, {"logical_streams": 4}, {"logical_streams": 4, "weights": [1, 3]}])
def test_the_list_at_the_same_world_size_resumes_exactly(marker_dirs, kwargs):
    full = [take(_loader(marker_dirs, rank, 2, **kwargs), 9) for rank in range(2)]
    states = [full[rank][4][2] for rank in range(2)]
    for rank in range(2):
        for own in (states, states[rank]):
            resumed = take(_loader(marker_dirs, rank, 2, resume_state_dict=own, prefetch=2, **kwargs), 4)
            for (inputs, targets, state), expected in zip(resumed, full[rank][5:], strict=False):
                assert torch.equal(inputs, expected[0]) and torch.equal(targets, expected[1])
                assert state == expected[2]


@pytest.mark.parametrize("weights", [None, [1, 3]])
@pytest.mark.parametrize("prefetch", [0, 3])
def test_logical_streams_resume_exactly_at_many_k(marker_dirs, weights, prefetch):
    full = take(_loader(marker_dirs, 1, 2, weights, logical_streams=5, prefetch=prefetch), 40)
    for k in (0, 1, 6, 17, 29):
        resumed = take(_loader(marker_dirs, 1, 2, weights, logical_streams=5, prefetch=prefetch,
                               resume_state_dict=json.loads(json.dumps(full[k][2]))), 4)
        for j, (inputs, targets, state) in enumerate(resumed, start=k + 1):
            assert torch.equal(inputs, full[j][0]) and torch.equal(targets, full[j][1]), f"batch {j} after {k}"
            assert state == full[j][2]


@pytest.mark.parametrize("world_size", [2, 3])
def test_logical_streams_equal_to_the_world_size_are_nanochats_batches(tokenizer, corpus_dir, world_size):
    for rank in range(world_size):
        ours = tokenizing_distributed_data_loader_with_state_bos_bestfit(
            tokenizer, 2, 64, "train", tokenizer_batch_size=16, device="cpu", buffer_size=40, data_dir=corpus_dir,
            rank=rank, world_size=world_size, logical_streams=world_size, prefetch=1)
        reference = published_loader.bestfit_loader(tokenizer, 2, 64, "train", corpus_dir, rank, world_size, 16, 40)
        for k in range(25):
            inputs, targets, state = next(ours)
            ref_inputs, ref_targets, _ = next(reference)
            assert torch.equal(inputs, ref_inputs) and torch.equal(targets, ref_targets), f"rank {rank} batch {k}"
        assert state["version"] == 3 and [part["stream"] for part in state["streams"]] == [rank]


def _refused(match, *args, **kwargs):
    with pytest.raises(ValueError, match=match) as failure:
        _loader(*args, **kwargs)
    assert "\n" not in str(failure.value)


def test_incomplete_or_mixed_lists_are_refused(marker_dirs):
    _, states = _run(marker_dirs, 3, 2, logical_streams=6)
    _refused(r"resume_state_dict\[0\] was saved by rank 0 of 3; a list must hold the states of ranks 0..1 of 2",
             marker_dirs, 0, 4, resume_state_dict=states[:2])
    _refused(r"resume_state_dict\[1\] was saved by rank 2 of 3; a list must hold the states of ranks 0..2 of 3",
             marker_dirs, 0, 4, resume_state_dict=[states[0], states[2], states[1]])
    _refused(r"saved with logical_streams=6, this loader has logical_streams=4 \(the number is fixed",
             marker_dirs, 0, 2, resume_state_dict=states, logical_streams=4)
    _, default_states = _run(marker_dirs, 3, 2)
    _refused(r"mixes state versions \[2, 3\]", marker_dirs, 0, 2,
             resume_state_dict=[default_states[0], states[1], states[2]])
    moved = json.loads(json.dumps(states))
    moved[1]["streams"][0]["stream"] = 2
    _refused(r"streams\[0\].stream must be 1 \(rank r of W serves logical streams r, r\+W, ...\), not 2",
             marker_dirs, 0, 2, resume_state_dict=moved)


def test_one_state_at_another_world_size_asks_for_the_list(marker_dirs):
    _, states = _run(marker_dirs, 2, 2, logical_streams=6)
    _refused(r"saved with world_size=2, this loader has world_size=3 \(to resume at another world size pass the "
             r"list of all ranks' states, gathered by nanodata.loader.gather_states\)",
             marker_dirs, 0, 3, resume_state_dict=states[0])
    _, (state,) = _run(marker_dirs, 1, 2, logical_streams=6)  # world size 1: one state is the whole list
    for rank in range(3):
        next(_loader(marker_dirs, rank, 3, resume_state_dict=state))
