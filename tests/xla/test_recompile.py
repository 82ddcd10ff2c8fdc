"""Fixed shapes keep XLA from recompiling: a jitted training step (embedding + linear + loss) over 3 epochs of
the loader's batches on the XLA device compiles during warm-up and never again."""

import pytest
import torch
from xla_helpers import SKIP_REASON, SMALL, B, T, epochs

from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit

pytest.importorskip("torch_xla", reason=SKIP_REASON)

import torch_xla  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402

WARMUP = 3  # steps: the first compiles the step, a later one the optimizer's first update of its state


def compile_count() -> int:
    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def test_a_jitted_step_over_three_epochs_compiles_only_during_warm_up(tokenizer, small_corpus, xla_device):
    torch.manual_seed(0)
    vocab = 1024  # token ids folded into 1024 buckets on the device: cl100k's 100K-row table made each step ~1 s
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab)).to(xla_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = bestfit(tokenizer, B, T, "train", device="xla", data_dir=small_corpus, **SMALL)

    step, seen = 0, set()
    while True:
        inputs, targets, state = next(loader)
        assert inputs.shape == targets.shape == (B, T) and inputs.dtype == targets.dtype == torch.long
        seen |= epochs(state)
        if max(seen) > 3:  # three whole epochs done
            break
        logits = model(inputs % vocab).view(-1, vocab)
        loss = torch.nn.functional.cross_entropy(logits, (targets % vocab).reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        torch_xla.sync()  # cut and run the step's graph, as a trainer does each step
        step += 1
        if step == WARMUP:
            after_warmup = compile_count()
    final = compile_count()
    report = f"{step} steps; CompileTime {after_warmup} after {WARMUP} warm-up steps, {final} at the end\n" \
             f"{met.short_metrics_report()}"
    print(report)
    assert seen == {1, 2, 3, 4}, report  # epochs 1-3 whole: two boundaries inside the measured steps
    assert 0 < after_warmup == final, report
