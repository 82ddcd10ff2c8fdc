"""Shared by tests/xla: a small corpus whose epochs pass in tens of batches, and batch capture to the host.

Importable without torch_xla (the conftest's fixtures and the skip reason need it in the main environment)."""


import torch

SKIP_REASON = ("torch_xla is not installed here: the TPU path runs in its own environment, `make test-xla` "
               "(.venv-xla: torch 2.9 + torch-xla 2.9)")
B, T = 2, 48  # small rows: an epoch of the small corpus is ~40 batches
SMALL = {"tokenizer_batch_size": 8, "buffer_size": 30}


def assert_same_batches(expected, got):
    assert len(expected) == len(got)
    for k, ((x1, y1, s1), (x2, y2, s2)) in enumerate(zip(expected, got, strict=False)):
        assert x2.dtype == x1.dtype == torch.long and x2.shape == x1.shape, f"batch {k}"
        assert torch.equal(x1, x2) and torch.equal(y1, y2), f"batch {k}: tokens differ"
        assert s1 == s2, f"batch {k}: state differs"


def epochs(state) -> set[int]:
    """Every epoch number a state (version 2 or 3) records, over its sources."""
    if "streams" in state:
        return {source["epoch"] for stream in state["streams"] for source in stream["sources"]}
    return {state["epoch"]}
