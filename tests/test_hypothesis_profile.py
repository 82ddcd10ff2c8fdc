"""The project's own hypothesis profile is the one in force: derandomized, and under CI without a deadline and
with a modest example count (tests/conftest.py). Checked in a fresh process with CI=true, as CI runs."""

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).parent
PROBE = ("import sys; sys.path[:0] = [sys.argv[1]]; import conftest; from hypothesis import settings; "
         "s = settings.default; print(settings._current_profile, s.derandomize, s.deadline, s.max_examples)")


def profile_under(env: dict) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")} | env
    out = subprocess.run([sys.executable, "-c", PROBE, str(TESTS)], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    return out.stdout.split()


def test_ci_profile_is_active_under_ci():
    name, derandomize, deadline, max_examples = profile_under({"CI": "true"})
    assert (name, derandomize, deadline) == ("nanodata-ci", "True", "None")
    assert 10 <= int(max_examples) <= 100


def test_runs_outside_ci_are_derandomized_too():
    assert profile_under({})[:2] == ["nanodata-dev", "True"]
    assert settings.default.derandomize  # this very run
