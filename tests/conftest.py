"""Shared fixtures. Fixture modules of each area are registered here as plugins."""

import pytest

from corpus import write_corpus

pytest_plugins = ["gcs_emulator"]


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
