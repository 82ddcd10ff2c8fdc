"""Shared fixtures. Fixture modules of each area are registered here as plugins."""

import os

import pytest
from corpus import write_corpus
from hypothesis import settings

# Property tests are derandomized everywhere: an example found at random would otherwise fail one run in many,
# in CI as anywhere. Found examples are kept as explicit @example where they were found. Under CI there is no
# per-example deadline (a busy 2-core machine makes timings noise) and a modest count keeps the suite in budget.
# A test's own @settings(max_examples=...) still wins for that test. HYPOTHESIS_PROFILE picks another profile.
settings.register_profile("nanodata-dev", derandomize=True, max_examples=100, print_blob=True)
settings.register_profile("nanodata-ci", derandomize=True, deadline=None, max_examples=50, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("nanodata-ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "nanodata-dev"))

pytest_plugins = ["support.gcs_emulator"]

# What authenticates cache entries and staged files (nanodata.storage.auth): the tests' own, so that no test makes
# or reads a secret file in the user's config directory (tests/storage/test_auth.py sets its own places).
os.environ.setdefault("NANODATA_CACHE_SECRET", "the nanodata test suite's cache secret")


@pytest.fixture(scope="session")
def tokenizer():
    from nanodata.tokenizer import load

    return load("cl100k_base")


@pytest.fixture
def corpus_dir(tmp_path):
    """4 parquet shards of 300 docs, row groups of 64; the last file is val."""
    data_dir = tmp_path / "corpus"
    write_corpus(data_dir)
    return data_dir
