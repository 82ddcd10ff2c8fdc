"""`nanodata pretokenize` killed with -9 at seeded random moments, and run out of disk.

After each fault a loader either refuses the output directory with one line, or sees exactly the files
of one clean run (the set committed before, or the finished new one): never shards of two runs, never a
partial set. A re-run to completion gives the bytes of a clean run.
"""

import re
import shlex

import pytest
from corpus import write_corpus
from faults import kill_at, kill_moments, nanodata_cmd, run_on_small_disk, same_tree, timed_run

from nanodata.errors import NanodataError
from nanodata.lite import DataLoaderLite

SEED = 1003
KILLS = 6
SIZES = (3_000, 7_000)  # two --shard-tokens: each kill interrupts a run over the other size's committed set


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """~0.9M cl100k tokens: about 300 shards of 3000, so the writing phase is most of a run."""
    data = tmp_path_factory.mktemp("corpus")
    write_corpus(data, n_files=4, docs_per_file=2000)
    return data


def pretokenize_cmd(corpus, out, shard_tokens: int) -> list[str]:
    return nanodata_cmd("pretokenize", "--input", corpus, "--tokenizer", "cl100k_base", "--out", out,
                        "--shard-tokens", shard_tokens, "--workers", 2)


def refused_or_clean(out, clean: dict) -> str:
    """'refused' if DataLoaderLite refuses `out` (one line, says to re-run), else the clean run `out` equals."""
    try:
        DataLoaderLite(1, 16, 0, 1, "train", out)
    except NanodataError as exc:
        assert "\n" not in str(exc) and "re-run 'nanodata pretokenize'" in str(exc)
        return "refused"
    same = [size for size, clean_out in clean.items() if same_tree(out, clean_out) == []]
    assert same, f"the loader accepted a directory no clean run left: {sorted(p.name for p in out.iterdir())}"
    return f"clean {same[0]}"


def test_kill_9_then_rerun_gives_the_clean_bytes(corpus, tmp_path):
    clean = {size: tmp_path / f"clean_{size}" for size in SIZES}
    seconds = max(timed_run(pretokenize_cmd(corpus, clean[size], size)) for size in SIZES)
    out = tmp_path / "out"
    timed_run(pretokenize_cmd(corpus, out, SIZES[-1]))
    seen = []
    for i, moment in enumerate(kill_moments(SEED, seconds, KILLS)):
        size = SIZES[i % 2]
        assert kill_at(pretokenize_cmd(corpus, out, size), moment) in (None, 0)
        seen.append(refused_or_clean(out, clean))
        timed_run(pretokenize_cmd(corpus, out, size))
        assert same_tree(out, clean[size]) == [], f"re-run after a kill at {moment:.2f}s"
    assert "refused" in seen, f"no kill landed while shards were being written: {seen}"


def test_full_disk_names_the_file_and_leaves_nothing_loadable(corpus, tmp_path, corpus_dir):
    clean = tmp_path / "clean"
    timed_run(pretokenize_cmd(corpus, clean, SIZES[0]))
    previous = tmp_path / "previous"  # a committed set (560 KB) that fits on the small disk
    timed_run(pretokenize_cmd(corpus_dir, previous, SIZES[1]))
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    done = run_on_small_disk(shlex.join(pretokenize_cmd(corpus, disk / "tok", SIZES[0])), disk, "1500k", kept,
                             setup=f"cp -a {shlex.quote(str(previous))} tok")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]  # above it only the progress bar
    assert re.fullmatch(rf"nanodata pretokenize: error: {re.escape(str(disk))}/tok/tokens_(val|train)_\d{{6}}\.npy: "
                        r"cannot write: no space left on the device; .*", error), error
    assert not list((kept / "tok").glob("*.tmp")) and not (kept / "tok" / "meta.json").exists()
    assert refused_or_clean(kept / "tok", {}) == "refused"
    timed_run(pretokenize_cmd(corpus, kept / "tok", SIZES[0]))  # the same directory, now with space
    assert same_tree(kept / "tok", clean) == []

