"""`nanodata tokenizer train` on a full disk: one line naming the file, never a half-new tokenizer directory."""

import re
import shlex

import pytest
from faults import nanodata_cmd, run_on_small_disk, same_tree, timed_run

from nanodata.errors import NanodataError
from nanodata.tokenizer import load


def train_cmd(corpus, out, vocab_size: int) -> list[str]:
    return nanodata_cmd("tokenizer", "train", "--input", corpus, "--vocab-size", vocab_size, "--out", out)


def test_full_disk_names_the_file_and_leaves_no_mixed_tokenizer(corpus_dir, tmp_path):
    clean, previous = tmp_path / "clean", tmp_path / "previous"
    timed_run(train_cmd(corpus_dir, clean, 470))
    timed_run(train_cmd(corpus_dir, previous, 300))
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    # an older tokenizer in --out, then every free block taken: the save has only the old tokenizer.json's
    # block, and the new ranks (470 tokens: 4.3 KB) need two
    setup = f"cp -a {shlex.quote(str(previous))} tok && (dd if=/dev/zero of=filler bs=4096 2>/dev/null || true)"
    done = run_on_small_disk(shlex.join(train_cmd(corpus_dir, disk / "tok", 470)), disk, "64k", kept, setup=setup)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]  # above it only the progress bar
    assert re.fullmatch(rf"nanodata tokenizer: error: {re.escape(str(disk))}/tok/mergeable_ranks\.tiktoken: "
                        r"cannot write: no space left on the device; .*", error), error
    assert not list((kept / "tok").glob("*.tmp"))
    load.cache_clear()
    with pytest.raises(NanodataError, match="not a tokenizer directory"):  # never old config over new ranks
        load(str(kept / "tok"))
    timed_run(train_cmd(corpus_dir, kept / "tok", 470))  # the same directory, now with space
    assert same_tree(kept / "tok", clean) == []
