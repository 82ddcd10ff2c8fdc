"""The `nanodata` console script for the foundation commands: help texts, end-to-end runs, error lines."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

NANODATA = str(Path(sys.executable).parent / "nanodata")  # the installed console script


def nanodata(*args, check=False):
    return subprocess.run([NANODATA, *map(str, args)], capture_output=True, text=True, timeout=120, check=check)


def test_top_level_help_lists_commands():
    proc = nanodata("--help", check=True)
    for command in ("download", "tokenizer", "pretokenize"):
        assert command in proc.stdout


@pytest.mark.parametrize("argv, options", [
    (["download"], ["--base-url", "--num-shards", "--workers", "--dir", "--name-template", "--attempts",
                    "--backoff-base"]),
    (["tokenizer"], ["train"]),
    (["tokenizer", "train"], ["--input", "--vocab-size", "--out", "--max-chars", "--doc-cap"]),
    (["pretokenize"], ["--input", "--tokenizer", "--out", "--shard-tokens", "--workers", "--prefix"]),
])
def test_command_help(argv, options):
    proc = nanodata(*argv, "--help", check=True)
    for option in options:
        assert option in proc.stdout


def test_tokenizer_without_action_is_a_usage_error():
    proc = nanodata("tokenizer")
    assert proc.returncode == 2 and "train" in proc.stderr


def test_train_then_pretokenize_end_to_end(corpus_dir, tmp_path):
    proc = nanodata("tokenizer", "train", "--input", corpus_dir, "--vocab-size", 350, "--out", tmp_path / "bpe",
                    check=True)
    assert "350 tokens, <|bos|> = 341" in proc.stdout
    proc = nanodata("pretokenize", "--input", corpus_dir, "--tokenizer", tmp_path / "bpe", "--out", tmp_path / "tok",
                    "--shard-tokens", 30_000, "--workers", 2, "--prefix", "demo", check=True)
    meta = json.loads((tmp_path / "tok" / "meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["docs"] == 1200
    assert f"{meta['tokens']} tokens (uint16) in {len(meta['shards'])} shard(s)" in proc.stdout
    assert np.load(tmp_path / "tok" / "demo_val_000000.npy")[0] == 341


def test_bad_input_is_one_line_naming_the_file(corpus_dir, tmp_path):
    (corpus_dir / "shard_00001.parquet").write_text("not parquet")
    proc = nanodata("pretokenize", "--input", corpus_dir, "--out", tmp_path / "tok")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "shard_00001.parquet" in proc.stderr
    proc = nanodata("tokenizer", "train", "--input", corpus_dir, "--vocab-size", 10, "--out", tmp_path / "bpe")
    assert proc.returncode == 2 and proc.stderr.startswith("nanodata tokenizer train: error: argument --vocab-size: 10 is out of range")
