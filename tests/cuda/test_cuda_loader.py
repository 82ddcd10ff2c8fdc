"""The loaders on a real CUDA device (`make test-cuda` on a GPU machine): every batch equals the CPU device's, across
an epoch boundary and a resume, while the GPU is kept busy so each asynchronous copy is still queued when the loader
fills its pinned staging buffer for the next batch (the race a missing wait would lose); on an explicit device index
and on a side stream; a batch the caller holds is never overwritten.

Without a CUDA device (this project's CI machines) the module is skipped with the reason: the CPU suite covers the
same loaders on device="cpu", and the CUDA-only code (pinned staging, the copy event) runs here only."""

import pytest
import torch
from batches import as_json
from corpus import write_small_corpus

from nanodata.loader import tokenizing_distributed_data_loader_with_state as concat
from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: these run on a GPU machine (`make test-cuda`)")

B, T = 2, 48  # small rows: an epoch of the small corpus is ~40 batches
SMALL = {"tokenizer_batch_size": 8}
N, RESUME_AT = 100, 60  # past the first epoch boundary; a resume after it
BUSY_CYCLES = 2_000_000  # ~1 ms of GPU time queued before each batch: the copy starts late


def _take(loader, n, busy: bool):
    """n batches (host copies of the tensors, made only at the end) with each batch's device tensors held until
    then; with busy, a GPU sleep is queued on the current stream before each next(), so the loader's copy of batch k
    is still pending while it prepares batch k+1."""
    held = []
    for _ in range(n):
        if busy:
            torch.cuda._sleep(BUSY_CYCLES)
        inputs, targets, state, *_ = next(loader)
        held.append((inputs, targets, as_json(state)))
    torch.cuda.synchronize()
    return [(x.cpu(), y.cpu(), state) for x, y, state in held], held


def _assert_same(expected, got):
    assert len(expected) == len(got)
    for k, ((x1, y1, s1), (x2, y2, s2)) in enumerate(zip(expected, got, strict=True)):
        assert x2.dtype == torch.long and x2.shape == x1.shape == (B, T), f"batch {k}"
        assert torch.equal(x1, x2) and torch.equal(y1, y2), f"batch {k}: tokens differ"
        assert s1 == s2, f"batch {k}: state differs"


def _loaders(kind, tmp_path):
    where = {"data_dir": write_small_corpus(tmp_path / "small")}
    if kind == "mixture":
        where = {"sources": [{"data_dir": write_small_corpus(tmp_path / "a", seed=70), "weight": 1.0},
                             {"data_dir": write_small_corpus(tmp_path / "b", seed=90), "weight": 2.0}],
                 "logical_streams": 2}
    make = concat if kind == "concat" else bestfit
    extra = {} if kind == "concat" else {"buffer_size": 30}
    return lambda tokenizer, device, **kw: make(tokenizer, B, T, "train", device=device, **SMALL, **extra,
                                                **where, **kw)


@pytest.mark.parametrize("kind", ["bestfit", "mixture", "concat"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_cuda_batches_equal_cpu_batches_across_an_epoch_and_a_resume(tokenizer, tmp_path, kind, prefetch):
    loader = _loaders(kind, tmp_path)
    kw = {"prefetch": prefetch}
    on_cpu, _ = _take(loader(tokenizer, "cpu", **kw), N, busy=False)
    on_cuda, held = _take(loader(tokenizer, "cuda", **kw), N, busy=True)
    assert all(x.device.type == "cuda" and y.device.type == "cuda" for x, y, _ in held)
    _assert_same(on_cpu, on_cuda)
    resumed, _ = _take(loader(tokenizer, "cuda", resume_state_dict=on_cpu[RESUME_AT - 1][2], **kw), N - RESUME_AT,
                       busy=True)
    _assert_same(on_cpu[RESUME_AT:], resumed)


def test_explicit_index_on_a_side_stream(tokenizer, tmp_path):
    """device=cuda:0 with the caller on a side stream: the copy is queued on the caller's stream, and the loader
    waits for it there before reusing its staging buffer."""
    loader = _loaders("bestfit", tmp_path)
    on_cpu, _ = _take(loader(tokenizer, "cpu"), 50, busy=False)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_cuda, held = _take(loader(tokenizer, torch.device("cuda", 0)), 50, busy=True)
    assert held[0][0].device == torch.device("cuda", 0)
    _assert_same(on_cpu, on_cuda)


def test_doc_info_on_the_device(tokenizer, tmp_path):
    data_dir = write_small_corpus(tmp_path / "small")
    batches = {}
    for device in ("cpu", "cuda"):
        loader = bestfit(tokenizer, B, T, "train", device=device, data_dir=data_dir, buffer_size=30,
                         return_doc_info=True, **SMALL)
        batches[device] = [next(loader) for _ in range(10)]
    for (x1, _, _, info1), (x2, _, _, info2) in zip(batches["cpu"], batches["cuda"], strict=True):
        assert torch.equal(x1, x2.cpu())
        assert info1.keys() == info2.keys()
        for key in info1:
            assert info2[key].device.type == "cuda" and torch.equal(info1[key], info2[key].cpu()), key
