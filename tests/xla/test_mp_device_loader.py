"""Overlapped transfer: the loaders work under torch_xla's MpDeviceLoader unchanged. It pulls batches in a thread
up to 24 ahead (16 on the host, 8 on the device) and copies them to the device while the step runs, so each
batch must be a buffer the loader never refills: these batches equal the plain CPU loader's."""

from itertools import islice

import pytest
import torch
from batches import as_json, take
from xla_helpers import SKIP_REASON, SMALL, B, T, assert_same_batches

from nanodata.lite import DataLoaderLite
from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit
from nanodata.pipeline.pretokenize import pretokenize

pytest.importorskip("torch_xla", reason=SKIP_REASON)

from torch_xla.distributed.parallel_loader import MpDeviceLoader  # noqa: E402

N = 60


def through_mp_device_loader(loader, device, n):
    wrapped = MpDeviceLoader(loader, device)
    out = []
    for inputs, targets, *rest in islice(iter(wrapped), n):
        assert inputs.device == device and targets.device == device
        out.append((inputs.cpu(), targets.cpu(), *(as_json(state) for state in rest)))
    wrapped._parallel_loader.close()  # joins its threads (MpDeviceLoader has no close of its own)
    loader.close()
    return out


def test_the_best_fit_loader_under_mp_device_loader_yields_the_cpu_batches(tokenizer, small_corpus, xla_device):
    """The MpDeviceLoader way: the loader on device="cpu", the wrapper does the transfer. (Not device="xla": it
    expects host tensors, and its copy of a batch's structure fails on tensors already on the device.)"""
    def loader():
        return bestfit(tokenizer, B, T, "train", device="cpu", data_dir=small_corpus, **SMALL)

    expected = take(loader(), N)
    assert_same_batches(expected, through_mp_device_loader(loader(), xla_device, N))


def test_data_loader_lite_under_mp_device_loader_yields_its_batches(small_corpus, tmp_path, xla_device):
    root = tmp_path / "tok"
    pretokenize(small_corpus, "cl100k_base", root, shard_tokens=1_500, workers=1, progress=False)

    def batches():
        lite = DataLoaderLite(B=B, T=T, process_rank=0, num_processes=1, split="train", data_root=root)
        while True:
            yield lite.next_batch()

    reference = batches()
    for x, y in through_mp_device_loader(batches(), xla_device, N):
        x_ref, y_ref = next(reference)
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)
