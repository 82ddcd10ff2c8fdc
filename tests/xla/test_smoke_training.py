"""scripts/train_xla_smoke.py end to end on the XLA device: 50 steps of a tiny GPT-like model fed by the loader;
the loss falls, the state saved mid-way restores into a loader with identical next batches, no recompiles."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from xla_helpers import SKIP_REASON

pytest.importorskip("torch_xla", reason=SKIP_REASON)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "train_xla_smoke.py"


def test_smoke_training_run(tmp_path):
    out = tmp_path / "result.json"
    result = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], env={**os.environ, "PJRT_DEVICE": "CPU"},
                            capture_output=True, text=True, timeout=500)
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert figures["steps"] == len(figures["losses"]) == 50
    assert figures["loss_fell"] and figures["last5_loss"] < 0.8 * figures["first_loss"]
    assert figures["restored_batches_equal"]
    assert figures["compiles_after_warmup"] == figures["compiles_at_end"] > 0
