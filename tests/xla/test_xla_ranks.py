"""On XLA the default rank and world size come from the XLA runtime (as torch.distributed's on GPU): two replicas
under torch_xla.launch (PJRT CPU with 2 devices) read disjoint documents, and each yields exactly the CPU
loader's batches for its rank of 2."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from batches import as_json, take
from xla_helpers import SKIP_REASON, SMALL, B, T, assert_same_batches

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit

pytest.importorskip("torch_xla", reason=SKIP_REASON)

HERE = Path(__file__).parent
N = 25  # batches per replica: about half of a rank's first epoch


def doc_numbers(tokenizer, batches) -> set[str]:
    """The documents whose tokens a batch holds: each piece of a row from one BOS to the next is one document
    (whole or cropped at its end), whose text starts with its name, docSEED-I."""
    bos, names = tokenizer.get_bos_token_id(), set()
    for inputs, targets, _ in batches:
        for row in torch.cat([inputs, targets[:, -1:]], dim=1).tolist():
            starts = [i for i, token in enumerate(row) if token == bos] + [len(row)]
            for begin, end in zip(starts, starts[1:], strict=False):
                match = re.match(r"doc\d+-\d+:", tokenizer.decode(row[begin + 1:end]))
                if match:
                    names.add(match.group())
    return names


def test_two_replicas_take_rank_and_world_from_the_xla_runtime(tokenizer, small_corpus, tmp_path):
    env = {**os.environ, "PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2", "PYTHONPATH": f"{HERE}{os.pathsep}{HERE.parent}"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):  # nothing but the runtime names the ranks
        env.pop(name, None)
    result = subprocess.run([sys.executable, str(HERE / "xla_replicas.py"), str(small_corpus), str(tmp_path), str(N)],
                            env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-4000:]

    runs = [torch.load(tmp_path / f"replica{i}.pt", weights_only=False) for i in range(2)]
    assert [(run["ordinal"], run["world_size"]) for run in runs] == [(0, 2), (1, 2)]
    for rank, run in enumerate(runs):
        assert {(state["rank"], state["world_size"]) for _, _, state in run["batches"]} == {(rank, 2)}
        on_cpu = take(bestfit(tokenizer, B, T, "train", device="cpu", rank=rank, world_size=2, data_dir=small_corpus,
                              **SMALL), N)
        assert_same_batches(on_cpu, [(x, y, as_json(state)) for x, y, state in run["batches"]])
    docs = [doc_numbers(tokenizer, run["batches"]) for run in runs]
    assert docs[0] and docs[1] and not docs[0] & docs[1]  # within the first epoch: no document on both ranks


def test_in_one_process_the_runtime_says_rank_0_of_1_and_explicit_arguments_win(tokenizer, small_corpus, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's variables: on XLA the runtime decides, not these

    def state(device, **kwargs):
        _, _, state = next(bestfit(tokenizer, B, T, "train", device=device, data_dir=small_corpus, **SMALL, **kwargs))
        return state["rank"], state["world_size"]

    assert state("xla") == (0, 1)
    assert state("cpu") == (1, 2)
    assert state("xla", rank=1, world_size=2) == (1, 2)
