"""tests/xla: the loaders on a real XLA device, torch_xla on PJRT's CPU backend (`make test-xla`, .venv-xla).

torch_xla needs torch 2.9 and the main environment has 2.13: under `make test` each module here is skipped with
xla_helpers.SKIP_REASON (a module-level importorskip; a conftest cannot skip). PJRT_DEVICE=CPU is set before
torch_xla starts its runtime, so these tests never look for a TPU.
"""

import os

import pytest

os.environ.setdefault("PJRT_DEVICE", "CPU")


@pytest.fixture
def small_corpus(tmp_path):
    from corpus import write_small_corpus

    return write_small_corpus(tmp_path / "small")


@pytest.fixture(scope="session")
def xla_device():
    import torch_xla

    return torch_xla.device()
