"""A real two-process torchrun on the GPU (both ranks on device cuda, gloo): checkpoint and resume exactly, and each
rank's batches are the ones the same run on the CPU device gets."""

import pytest
import torch
from torchrun_runs import checkpoint_and_resume

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: these run on a GPU machine (`make test-cuda`)")


def test_two_ranks_on_the_gpu_resume_exactly_with_the_cpu_batches(corpus_dir, tmp_path):
    on_cuda = checkpoint_and_resume(corpus_dir, tmp_path / "cuda", "cuda")
    on_cpu = checkpoint_and_resume(corpus_dir, tmp_path / "cpu", "cpu")
    assert on_cuda == on_cpu
