"""Elastic resume with real processes (torchrun, gloo, CPU): 2 ranks with 6 logical streams take a few batches and
gather every rank's state (gather_states); a new torchrun resumes from that list on 1 rank, another on 3 ranks,
each running to the end of the epoch. Per-document markers show that every document of the epoch was used exactly
once across the rows of all ranks before and after the resume, for one data_dir and for a 2-source mixture. The
same check fails on a resume that drops the buffered documents."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from markers import check_each_document_used_once, write_marker_corpus
from torchrun_elastic import LOGICAL_STREAMS, elastic_loader, take

SCRIPT = Path(__file__).with_name("torchrun_elastic.py")
SAVED_WORLD, SAVED_STEPS = 2, 6


def _torchrun(world_size, data_dirs, weights, out_dir, *args):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    sources = [arg for d in data_dirs for arg in ("--data-dir", str(d))]
    sources += [arg for w in weights or () for arg in ("--weight", str(w))]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
               str(SCRIPT), *sources, "--out-dir", str(out_dir), *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def _rows(out_dir, tag, world_size):
    return np.concatenate([np.load(out_dir / f"{tag}_rows_rank{rank}.npy") for rank in range(world_size)])


def _states(out_dir, tag):
    return json.loads((out_dir / f"{tag}_states.json").read_text())


@pytest.fixture(scope="module", params=[None, [2.0, 1.0]], ids=["one data_dir", "mixture"])
def saved(request, tmp_path_factory):
    """A 2-rank run stopped mid-epoch: (data dirs, weights, its out dir with its rows and gathered states)."""
    out = tmp_path_factory.mktemp("elastic")
    data_dirs = [write_marker_corpus(out / "a", first=0, docs_per_file=96)]  # 48 docs per logical stream
    if request.param is not None:  # a second, smaller corpus, with its own epochs
        data_dirs.append(write_marker_corpus(out / "b", first=10_000, seed=1, docs_per_file=48))
    _torchrun(SAVED_WORLD, data_dirs, request.param, out, "--tag", "saved", "--steps", str(SAVED_STEPS))
    states = _states(out, "saved")
    assert [state["rank"] for state in states] == list(range(SAVED_WORLD))
    assert {source["cursor"][0] for state in states for part in state["streams"] for source in part["sources"]} \
        == {1}  # stopped before any logical stream finished its epoch
    assert all(part["buffer"] for state in states for part in state["streams"])  # with docs buffered
    return data_dirs, request.param, out


@pytest.mark.parametrize("world_size", [1, 3])
def test_resume_on_another_world_size_uses_every_document_of_the_epoch_once(saved, world_size):
    data_dirs, weights, out = saved
    tag = f"resumed{world_size}"
    _torchrun(world_size, data_dirs, weights, out, "--tag", tag, "--resume", str(out / "saved_states.json"),
              "--until-epoch", "2")
    states = _states(out, tag)
    for rank, state in enumerate(states):
        assert (state["rank"], state["world_size"]) == (rank, world_size)
        assert [part["stream"] for part in state["streams"]] == list(range(rank, LOGICAL_STREAMS, world_size))
    rows = np.concatenate([_rows(out, "saved", SAVED_WORLD), _rows(out, tag, world_size)])
    assert check_each_document_used_once(rows, states, data_dirs) == 2


def test_a_resume_that_drops_the_buffered_documents_fails_the_check(saved):
    data_dirs, weights, out = saved
    states = _states(out, "saved")
    for state in states:
        for part in state["streams"]:
            part["buffer"] = []
    rows, state = take(elastic_loader(data_dirs, weights, states, rank=0, world_size=1), until_epoch=2)
    with pytest.raises(AssertionError, match="uses missing"):
        check_each_document_used_once(np.concatenate([_rows(out, "saved", SAVED_WORLD), rows]), [state], data_dirs)
