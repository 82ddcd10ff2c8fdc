"""Device handling, output buffers (one per batch), and per-row document boundaries for varlen attention."""

import torch

from nanodata.loader import tokenizing_distributed_data_loader, tokenizing_distributed_data_loader_bos_bestfit


def _bestfit(tokenizer, corpus_dir, **kwargs):
    return tokenizing_distributed_data_loader_bos_bestfit(tokenizer, 3, 64, "train", tokenizer_batch_size=16,
                                                          buffer_size=50, data_dir=corpus_dir, **kwargs)


def test_device_may_be_a_string_or_a_torch_device(tokenizer, corpus_dir):
    by_string = _bestfit(tokenizer, corpus_dir, device="cpu", prefetch=0)
    by_device = _bestfit(tokenizer, corpus_dir, device=torch.device("cpu"), prefetch=2)
    for _ in range(5):
        a, b = next(by_string), next(by_device)
        assert a[0].device.type == "cpu" and a[0].dtype == torch.long
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_each_batch_is_a_new_buffer_never_rewritten(tokenizer, corpus_dir):
    """[inputs | targets] of one contiguous buffer per batch; a batch the caller keeps is never overwritten, so
    holding it (or a wrapper reading ahead, as torch_xla's MpDeviceLoader) needs no clone."""
    loader = _bestfit(tokenizer, corpus_dir, device="cpu", prefetch=0)
    inputs, targets = next(loader)
    assert inputs.is_contiguous() and targets.is_contiguous()
    assert targets.data_ptr() == inputs.data_ptr() + inputs.numel() * inputs.element_size()  # [inputs | targets]
    first, first_targets = inputs.clone(), targets.clone()
    inputs2, _ = next(loader)
    assert inputs2.data_ptr() != inputs.data_ptr() and not torch.equal(inputs2, first)
    assert torch.equal(inputs, first) and torch.equal(targets, first_targets)


def _check_doc_info(inputs, info, bos):
    B, T = inputs.shape
    cu, positions = info["cu_seqlens"], info["position_ids"]
    assert cu.shape == (B * T + 1,) and cu.dtype == torch.int32 and positions.shape == (B, T)
    flat = inputs.reshape(-1)
    starts = [i for i in range(B * T) if i % T == 0 or flat[i] == bos]
    assert cu[:len(starts)].tolist() == starts and (cu[len(starts):] == B * T).all()
    expected = torch.empty(B * T, dtype=torch.long)
    for begin, end in zip(starts, starts[1:] + [B * T], strict=False):
        expected[begin:end] = torch.arange(end - begin)
    assert torch.equal(positions.reshape(-1), expected)


def test_doc_info_bestfit_rows_start_with_bos(tokenizer, corpus_dir):
    bos = tokenizer.get_bos_token_id()
    loader = _bestfit(tokenizer, corpus_dir, device="cpu", prefetch=1, return_doc_info=True)
    for _ in range(5):
        inputs, targets, info = next(loader)
        assert (inputs[:, 0] == bos).all()
        _check_doc_info(inputs, info, bos)


def test_doc_info_concatenation_rows_may_start_mid_document(tokenizer, corpus_dir):
    bos = tokenizer.get_bos_token_id()
    loader = tokenizing_distributed_data_loader(tokenizer, 3, 64, "train", device="cpu", data_dir=corpus_dir,
                                                return_doc_info=True, prefetch=0)
    mid_document = 0
    for _ in range(5):
        inputs, targets, info = next(loader)
        mid_document += int((inputs[:, 0] != bos).sum())
        _check_doc_info(inputs, info, bos)
    assert mid_document > 0
