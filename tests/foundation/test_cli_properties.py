"""Whatever arguments a user types, every `nanodata` command ends in correct output or a one-line error
(exit 2, `nanodata CMD: error: ...`): never a traceback. Arguments are drawn from pools of good, odd and
wrong values (negative, zero, nan, huge, files where directories go, missing paths, invalid buckets)."""

import contextlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from corpus import write_corpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nanodata.cli import main

ODD_NUMBERS = ["-1", "0", "nan", "inf", "1e309", "x", "", "99999999999999999999"]
ODD_PATHS = ["{root}/file.txt", "{root}/missing", "{root}/file.txt/under", "", "relative/path"]
ODD_OUTS = ["{root}/file.txt", "{root}/file.txt/under", "{root}/corpus"]
ODD_BUCKETS = ["gs://UPPER/x", "gs://", "gs:/b/x", "gs://a/../b", "gs://ab"]


@pytest.fixture(scope="module")
def places():
    """What the pools name: a parquet corpus, a chunker JSONL, a C++ tree, a built corpus, a plain file."""
    root = Path(tempfile.mkdtemp(prefix="nanodata-cli-props-"))
    write_corpus(root / "corpus", n_files=2, docs_per_file=40)
    with open(root / "chunks.jsonl", "w") as f:
        for i in range(30):
            f.write(json.dumps({"text": f"int f{i}() {{ return {i}; }}\n"}) + "\n")
        f.write("not json\n")
    (root / "file.txt").write_text("a plain file\n")
    (root / "tree" / "p").mkdir(parents=True)
    (root / "tree" / "p" / "a.cpp").write_text("int a() { return 1; }\nint b() { return a(); }\n")
    assert main(["to-parquet", "--input", str(root / "chunks.jsonl"), "--out", str(root / "built")]) == 0
    yield root
    shutil.rmtree(root, ignore_errors=True)


# command -> [(option or None for a positional, required, good values, odd values)]; "{out}" is a fresh path
COMMANDS = {
    "to-parquet": [("--input", True, ["{root}/chunks.jsonl"], ODD_PATHS), ("--out", True, ["{out}"], ODD_OUTS),
                   ("--rows-per-file", False, ["7", "1000"], ODD_NUMBERS),
                   ("--row-group-size", False, ["4", "1024"], ODD_NUMBERS),
                   ("--val-fraction", False, ["0", "0.1"], ["-0.5", "1", "1.5", "nan"]),
                   ("--seed", False, ["0", "7"], ODD_NUMBERS), ("--compression", False, ["zstd", "none"], ["bogus"]),
                   ("--on-error", False, ["skip", "fail"], ["x"])],
    "chunk": [("--inputs", False, ["{root}/chunks.jsonl"], ODD_PATHS), ("--project-dirs", False, ["{root}/tree"], ODD_PATHS),
              ("--output", False, ["{out}/docs.jsonl"], ODD_OUTS + ["{root}/chunks.jsonl"]),
              ("--mode", False, ["basic", "compilable"], ["x"]), ("--max-tokens", False, ["16", "64"], ODD_NUMBERS),
              ("--workers", False, ["1", "2"], ["0", "-2", "x"]), ("--partition-mb", False, ["0.001", "1"], ODD_NUMBERS),
              ("--cross-depth", False, ["0", "2"], ODD_NUMBERS), ("--max-file-bytes", False, ["100", "100000"], ODD_NUMBERS),
              ("--extensions", False, [".cpp,.h"], [",", ""]), ("--tokenizer", False, ["cl100k_base"], ["nope"]),
              ("--parquet-dir", False, ["{out}/corpus"], ODD_OUTS + ["gs://b/x"]),
              ("--seed", False, ["42", "7"], ODD_NUMBERS), ("--val-fraction", False, ["0.01", "0.5"], ["1", "nan"])],
    "pretokenize": [("--input", True, ["{root}/corpus"], ODD_PATHS), ("--out", True, ["{out}"], ODD_OUTS),
                    ("--tokenizer", False, ["cl100k_base"], ["nope", "{root}/file.txt"]),
                    ("--shard-tokens", False, ["3000", "100000"], ODD_NUMBERS),
                    ("--workers", False, ["1", "2"], ["0", "x", "100000"]), ("--prefix", False, ["ok"], ["", "a/b", ".."])],
    "tokenizer train": [("--input", True, ["{root}/corpus"], ODD_PATHS), ("--out", True, ["{out}"], ODD_OUTS),
                        ("--vocab-size", True, ["300"], ["10", "x", "99999999"]),
                        ("--max-chars", False, ["2000"], ["0", "-1"]), ("--doc-cap", False, ["100"], ["0", "x"])],
    "report": [(None, True, ["{root}/built"], ODD_PATHS), ("--out", False, ["{out}"], ODD_OUTS),
               ("--tokenizer", False, ["cl100k_base"], ["nope"])],
    "download": [("--base-url", True, ["http://127.0.0.1:9/data"], ["", "ftp://x", "http://", "http://h:port"]),
                 ("--num-shards", True, ["1"], ODD_NUMBERS), ("--dir", False, ["{out}"], ODD_OUTS),
                 ("--workers", False, ["1"], ODD_NUMBERS),
                 ("--name-template", False, ["{index}.parquet"], ["x.parquet", "{index.x}", "../{index}.parquet"]),
                 ("--attempts", True, ["1"], ODD_NUMBERS), ("--backoff-base", True, ["0"], ["-1", "nan", "x"])],
    "sync": [(None, True, ["{root}/corpus"], ODD_BUCKETS + ODD_PATHS), (None, True, ["{out}"], ODD_BUCKETS + ODD_OUTS),
             ("--workers", False, ["1", "4"], ODD_NUMBERS), ("--attempts", False, ["1"], ODD_NUMBERS),
             ("--backoff", False, ["0"], ["-1", "nan"]), ("--deadline", False, ["5"], ["0", "-1", "nan"])],
}


# Every argument list hypothesis has found failing, kept so each run tries it again (derandomized runs may not
# draw it): one tuple part per COMMANDS entry, in order, as `check` receives them.
FOUND = {
    # OverflowError traceback (exit 0 with --project-dirs instead of --inputs)
    "chunk": [(["--inputs", "{root}/chunks.jsonl"], [], ["--output", "{out}/docs.jsonl"], [], [], [], [], [],
               ["--max-file-bytes", "99999999999999999999"], [], [], [], [], []),
              ([], ["--project-dirs", "{root}/tree"], ["--output", "{out}/docs.jsonl"], [], [], [], [], [],
               ["--max-file-bytes", "99999999999999999999"], [], [], [], [], [])],
    # --dir under a file; --attempts past 1000 and past float range
    "download": [(["--base-url", "http://127.0.0.1:9/data"], ["--num-shards", "1"], ["--dir", "{root}/file.txt/under"],
                  [], [], ["--attempts", "1"], ["--backoff-base", "0"]),
                 (["--base-url", "http://127.0.0.1:9/data"], ["--num-shards", "1"], [], [], [],
                  ["--attempts", "99999999999999999999"], ["--backoff-base", "0"]),
                 (["--base-url", "http://127.0.0.1:9/data"], ["--num-shards", "1"], [], [], [],
                  ["--attempts", "1e309"], ["--backoff-base", "0"])],
    # an input path under a file
    "to-parquet": [(["--input", "{root}/file.txt/under"], ["--out", "{out}"], [], [], [], [], [], [])],
}


def argument(option, required, good, odd):
    """Mostly good values, so runs get past the parser; an odd one or a left-out option often enough."""
    values = st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(odd))
    pair = values.map(lambda v: [v] if option is None else [option, v])
    return pair if required else st.one_of(pair, st.just([]))


def run_cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse: usage errors exit 2
            code = exc.code
    return code, err.getvalue()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_any_arguments_give_output_or_one_line(places, command, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # gs:// never reaches a real service
    program = command.split()[0]

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(parts=st.tuples(*(argument(*spec) for spec in COMMANDS[command])))
    def check(parts):
        out = Path(tempfile.mkdtemp(prefix="out-", dir=places))
        argv = command.split() + [a.replace("{root}", str(places)).replace("{out}", str(out)) for part in parts for a in part]
        code, stderr = run_cli(argv)
        assert code in (0, 1, 2), (argv, code, stderr)
        assert "Traceback" not in stderr, (argv, stderr)
        if code == 2 and f"nanodata {program}" in stderr:  # our line or argparse's usage + one error line
            message = stderr[stderr.rindex(f"nanodata {program}"):]
            assert len(message.strip().splitlines()) == 1, (argv, stderr)
        shutil.rmtree(out, ignore_errors=True)

    for parts in FOUND.get(command, []):
        assert len(parts) == len(COMMANDS[command])
        check = example(parts=parts)(check)
    cwd = os.getcwd()
    os.chdir(places)  # relative paths land in the scratch directory
    try:
        check()
    finally:
        os.chdir(cwd)
