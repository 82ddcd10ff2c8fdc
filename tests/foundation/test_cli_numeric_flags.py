"""Every numeric flag of every `nanodata` subcommand has a range, checked before any work.

The walk starts from each subcommand's `--help` (what a user sees), finds the flags through the parser that
printed it, and gives each numeric flag huge, negative, zero, nan, inf and text values. A value outside the
flag's range ends in exit 2 and one line naming the flag, the value and the range: no traceback, no file
written, no worker process or thread started. A value inside it is accepted by the parser."""

import argparse
import contextlib
import io
import multiprocessing
import os
import threading

import pytest

from nanodata.cli import COMMANDS, build_parser, main

BAD_VALUES = ["99999999999999999999", "1e400", "-1", "0", "nan", "inf", "-inf", "x", "", "1e9", "0.5"]


def _choices(parser) -> dict:
    """The sub-commands a parser dispatches to (its subparsers action's choices), else none."""
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def programs() -> list[list[str]]:
    """Every runnable `nanodata ...` command, as typed, found by walking the parsers main() builds: a new
    sub-command (or a sub-sub-command such as `tokenizer train`) is covered without editing this test."""
    found = []

    def walk(parser, words):
        children = _choices(parser)
        if not children:
            found.append(words)
        for word, child in children.items():
            walk(child, words + [word])

    for name in COMMANDS:
        walk(_choices(build_parser(name))[name], [name])
    return found


PROGRAMS = programs()


def subparser(program: list[str]):
    """The parser of `nanodata PROGRAM...`, as main() builds it."""
    parser = build_parser(program[0])
    for word in program:
        parser = _choices(parser)[word]
    return parser


def options_in_help(program: list[str]) -> set[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(program + ["--help"]) == 0
    return {word.strip("[],") for word in out.getvalue().split() if word.startswith(("--", "[--"))}


def numeric_flags(program: list[str]) -> list:
    """(option, Range) for each flag that takes a number; a bare int/float type fails: it has no range."""
    found = []
    for action in subparser(program)._actions:
        if action.type in (int, float):
            pytest.fail(f"nanodata {' '.join(program)} {action.option_strings}: a number with no range "
                        "(use nanodata.ranges.flag)")
        if hasattr(action.type, "allowed"):
            found.append((action.option_strings[0] if action.option_strings else action.dest, action.type.allowed))
    return found


def good_number(allowed) -> str:
    value = allowed.lo + 1 if allowed.lo + 1 <= allowed.hi else (allowed.lo + allowed.hi) / 2
    return str(int(value)) if allowed.integer else str(float(value))


def required_argv(program: list[str], tmp_path) -> list[str]:
    """Every required argument with a plausible value, so the parser reaches the flag under test."""
    argv = []
    parser = subparser(program)
    # a required group of alternatives (chunk's --output | --parquet-dir) takes its first one
    firsts = {id(group._group_actions[0]) for group in parser._mutually_exclusive_groups if group.required}
    for action in parser._actions:
        if not (action.required or id(action) in firsts) or isinstance(action, argparse._SubParsersAction):
            continue
        value = good_number(action.type.allowed) if hasattr(action.type, "allowed") else str(tmp_path / "p")
        if action.dest == "base_url":
            value = "http://127.0.0.1:9/data"
        argv += ([action.option_strings[0]] if action.option_strings else []) + [value]
    return argv


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("program", PROGRAMS, ids=" ".join)
def test_every_numeric_flag_is_ranged_and_checked_first(program, tmp_path, monkeypatch):
    helped = options_in_help(program)
    flags = numeric_flags(program)
    assert flags, f"nanodata {' '.join(program)}: no numeric flag found"
    assert {f for f, _ in flags if f.startswith("--")} <= helped  # the walk covers what --help shows
    monkeypatch.chdir(tmp_path)
    threads = threading.active_count()
    for option, allowed in flags:
        for value in BAD_VALUES:
            argv = program + required_argv(program, tmp_path)
            argv = [a for i, a in enumerate(argv) if option not in (a, argv[i - 1] if i else None)] + [f"{option}={value}"]  # = so "-inf" is a value
            try:
                in_range = allowed.contains(int(value) if allowed.integer else float(value))
            except ValueError:
                in_range = False
            if in_range:
                subparser(program).parse_args(argv[len(program):])  # accepted; not run (it would do work)
                continue
            code, stdout, stderr = run(argv)
            assert code == 2, (argv, code, stderr)
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in stderr, (argv, stderr)
            assert option in lines[0] and (repr(value) in lines[0] or f"{value} is out of range" in lines[0]), lines
            assert allowed.describe() in lines[0], (argv, lines)
            assert stdout == "" and os.listdir(tmp_path) == [], (argv, stdout, os.listdir(tmp_path))
            assert multiprocessing.active_children() == [] and threading.active_count() == threads, argv


def test_the_walk_finds_every_command_and_ranged_flag():
    """Each command main() knows is walked, and each numeric flag found has its range (counted here so a
    parser the walk cannot reach shows up as a smaller number, not as silence)."""
    assert {p[0] for p in PROGRAMS} == set(COMMANDS) and ["tokenizer", "train"] in PROGRAMS
    flags = {(" ".join(p), option) for p in PROGRAMS for option, _ in numeric_flags(p)}
    assert {("chunk", f) for f in ("--max-file-bytes", "--max-tokens", "--cross-depth", "--workers", "--partition-mb",
                                   "--rows-per-file", "--val-fraction", "--seed")} <= flags
    assert len(flags) >= 29, sorted(flags)  # 29 when chunk --parquet-dir came


def test_workers_cap_is_a_multiple_of_the_cpus():
    from nanodata.ranges import CPUS, PROCESS_WORKERS, PROCESS_WORKERS_PER_CPU

    assert PROCESS_WORKERS.hi == max(8, PROCESS_WORKERS_PER_CPU * CPUS)
    code, _, stderr = run(["chunk", "--output", "x.jsonl", "--workers", str(10**9)])
    assert code == 2 and f"<= {PROCESS_WORKERS.hi}" in stderr and "per CPU" in stderr


def test_library_entry_points_use_the_same_ranges(tmp_path):
    """The functions behind the flags (what the DAG tasks call) refuse the offenders too, before any work."""
    from nanodata.errors import NanodataError
    from nanodata.pipeline.download import download_shards
    from nanodata.pipeline.to_parquet import jsonl_to_parquet
    from nanodata.report.figures import check_max_tokens

    with pytest.raises(NanodataError, match="--num-shards"):
        download_shards("http://127.0.0.1:9/d", 10**20, tmp_path / "d")
    with pytest.raises(NanodataError, match="--timeout"):
        download_shards("http://127.0.0.1:9/d", 1, tmp_path / "d", timeout=1e300)
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    with pytest.raises(NanodataError, match="--row-group-size"):
        jsonl_to_parquet([str(tmp_path / "in.jsonl")], str(tmp_path / "out"), row_group_size=10**20)
    with pytest.raises(NanodataError, match="--max-tokens"):
        check_max_tokens(10**20)
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]

