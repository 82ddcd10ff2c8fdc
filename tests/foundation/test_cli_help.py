"""`nanodata chunk|to-parquet|report --help` say what the code does: each figure a help quotes is read from the
constant the code uses, each wording checked against what the flag does."""

import contextlib
import io

import pytest

from nanodata.cli import main
from nanodata.pipeline.cleaning.filters import MAX_LINE_LENGTH, MAX_LINES, MAX_MEAN_LINE_LENGTH
from nanodata.pipeline.shuffle import FILE_BYTES, ROW_GROUP_BYTES


def help_text(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([command, "--help"]) == 0
    return " ".join(out.getvalue().split())


SHARD = f"train docs per shard, at most: a shard also closes at {FILE_BYTES >> 20} MB of JSON lines (default: 50000)"


@pytest.mark.parametrize("command, words", [
    # --no-reuse turns reuse off (reuse.FileCache.load reads nothing): a clean rebuild that still writes the cache
    ("chunk", "--no-reuse --cache: chunk every file again (a clean rebuild) and refresh its entry, instead of reading "
              "each unchanged file's result from the cache"),
    ("chunk", f"(over {MAX_LINES:,} lines, a line over {MAX_LINE_LENGTH:,} characters or a mean over "
              f"{MAX_MEAN_LINE_LENGTH})"),
    ("chunk", "(written to OUTPUT.tmp, then renamed; with --append, OUTPUT itself)"),  # writer.JsonlWriter
    ("chunk", "calls in other files (as --resolver finds them, breadth-first"),  # not only unique names: clang's USRs
    ("chunk", "and a single line larger than the budget by characters"),  # pack: a line over the budget
    ("chunk", SHARD),
    ("to-parquet", SHARD),
    ("to-parquet", f"docs per parquet row group, at most: a group also closes at {ROW_GROUP_BYTES >> 20} MB"),
    ("report", "or `nanodata chunk --parquet-dir` (whose summary in it is read too, all but the ambiguity table"),
    ("report", "a `nanodata tokenizer train` directory"),
    ("report", "what cleaning dropped and redacted and the clang resolver's figures; one with neither ambiguity "
               "counts nor near-duplicates is refused"),
])
def test_help_says_what_the_code_does(command, words):
    assert words in help_text(command)

