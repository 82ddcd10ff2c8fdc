"""On device="xla" the loaders yield exactly the CPU device's batches (tokens and states), across an epoch
boundary and after a resume; every batch has one shape and dtype; a batch the caller holds is never overwritten."""

import pytest
import torch
from batches import as_json, take
from corpus import write_small_corpus
from xla_helpers import SKIP_REASON, SMALL, B, T, assert_same_batches, epochs

from nanodata.lite import DataLoaderLite
from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit
from nanodata.pipeline.pretokenize import pretokenize

pytest.importorskip("torch_xla", reason=SKIP_REASON)

N = 100  # batches: past the first epoch boundary of every source below
RESUME_AT = 60  # after the boundary


def _mixture(tmp_path):
    """Two sources of different sizes (the small one wraps first), 1:2 by tokens, on 2 logical streams."""
    return {"sources": [{"data_dir": write_small_corpus(tmp_path / "a", seed=70), "weight": 1.0},
                        {"data_dir": write_small_corpus(tmp_path / "b", seed=90), "weight": 2.0}],
            "logical_streams": 2}


@pytest.mark.parametrize("kind", ["bestfit", "mixture"])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_xla_batches_equal_cpu_batches_across_an_epoch_and_a_resume(tokenizer, tmp_path, xla_device, kind, prefetch):
    where = {"data_dir": write_small_corpus(tmp_path / "small")} if kind == "bestfit" else _mixture(tmp_path)

    def loader(device, **kwargs):
        return bestfit(tokenizer, B, T, "train", device=device, prefetch=prefetch, **SMALL, **where, **kwargs)

    on_cpu = take(loader("cpu"), N)
    xla_loader = loader("xla")
    first = next(xla_loader)
    assert first[0].device.type == "xla" and first[0].device == xla_device
    on_xla = [(first[0].cpu(), first[1].cpu(), as_json(first[2]))] + take(xla_loader, N - 1)
    assert_same_batches(on_cpu, on_xla)
    assert len(epochs(on_cpu[0][2])) == 1 and max(epochs(on_cpu[-1][2])) >= 2  # an epoch boundary was crossed

    resumed = take(loader("xla", resume_state_dict=on_cpu[RESUME_AT - 1][2]), N - RESUME_AT)
    assert_same_batches(on_cpu[RESUME_AT:], resumed)


@pytest.mark.parametrize("device", ["cpu", "xla"])
def test_a_held_batch_keeps_its_values(tokenizer, small_corpus, device):
    """Each batch is its own tensor: the loader never writes one the caller may still hold (no clone needed)."""
    loader = bestfit(tokenizer, B, T, "train", device=device, prefetch=2, data_dir=small_corpus, **SMALL)
    held = [next(loader) for _ in range(8)]  # eight batches alive at once, as a read-ahead wrapper keeps them
    again = take(bestfit(tokenizer, B, T, "train", device="cpu", prefetch=0, data_dir=small_corpus, **SMALL), 8)
    assert_same_batches(again, [(x.cpu(), y.cpu(), as_json(state)) for x, y, state in held])


def test_data_loader_lite_to_xla_equals_cpu_across_the_shard_wrap_and_a_resume(small_corpus, tmp_path, xla_device):
    """DataLoaderLite yields host tensors (as build-nanogpt's); the trainer moves them with .to(device). Each batch
    is a new tensor, so the transfer may be issued ahead (MpDeviceLoader) without a clone."""
    root = tmp_path / "tok"
    pretokenize(small_corpus, "cl100k_base", root, shard_tokens=1_500, workers=1, progress=False)

    def lite():
        return DataLoaderLite(B=B, T=T, process_rank=0, num_processes=1, split="train", data_root=root)

    reference, on_xla, states, shards = lite(), lite(), [], []
    for _ in range(40):
        x, y = reference.next_batch()
        states.append(on_xla.state_dict())
        xd, yd = (t.to(xla_device) for t in on_xla.next_batch())
        assert xd.device.type == "xla" and xd.shape == (B, T) and xd.dtype == torch.long
        assert torch.equal(xd.cpu(), x) and torch.equal(yd.cpu(), y)
        shards.append(reference.current_shard)
    assert set(shards) == set(range(len(reference.shards))) and shards != sorted(shards)  # every shard, then a wrap

    resumed, reference = lite(), lite()
    resumed.load_state_dict(states[25])
    for _ in range(25):
        reference.next_batch()
    for _ in range(15):
        x, _ = reference.next_batch()
        assert torch.equal(resumed.next_batch()[0].to(xla_device).cpu(), x)
