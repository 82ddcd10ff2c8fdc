"""Bad input, project-dir walking, output safety and the CLI of `nanodata chunk`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpp_projects import LAYERS, read_docs, write_jsonl

from nanodata.cli import main
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild import chunk_to_jsonl

GOOD = LAYERS["calls.cpp"]
NANODATA = str(Path(sys.executable).with_name("nanodata"))


def _write_lines(path, lines: list[bytes]):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@pytest.fixture
def bad_jsonl(tmp_path):
    return _write_lines(tmp_path / "mixed.jsonl", [
        json.dumps({"text": GOOD, "path": "src/calls.cpp", "repo": "demo"}).encode(),
        b'{"text": "int f() { return 1; }", oops',            # 2: invalid JSON
        json.dumps({"path": "no_text.cpp"}).encode(),           # 3: missing text
        json.dumps({"text": 42}).encode(),                      # 4: text not a string
        b'{"text": "int g() { return \xff; }"}',                # 5: not UTF-8
        json.dumps({"text": "   "}).encode(),                   # 6: empty text
        b"",                                                     # blank line: ignored
        json.dumps({"text": "int h() { return 2; }"}).encode(),  # 8: fine
    ])


def test_bad_lines_reported_with_line_numbers_and_run_goes_on(bad_jsonl, tmp_path):
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[bad_jsonl], max_tokens=2048)
    problems = summary["problems"]
    for line, words in [(2, "invalid JSON"), (3, 'no "text"'), (4, '"text" is int'), (5, "not UTF-8")]:
        assert any(p.startswith(f"{bad_jsonl}:{line}: ") and words in p for p in problems), (line, problems)
    # a record whose text is empty was read, then dropped by the `empty` filter: named with its reason
    assert summary["cleaning"]["dropped"]["empty"]["listed"] == [{"file": "mixed.jsonl:6", "figure": "only whitespace (3 characters)"}]
    assert summary["files_read"] == 3 and summary["files_dropped"] == 1 and summary["files_failed"] == 4
    docs = read_docs(tmp_path / "out.jsonl")
    assert docs[0]["source"] == "demo/src/calls.cpp" and docs[0]["kind"] == "file"
    assert docs[1]["source"] == "mixed.jsonl:8"  # the input's name: where it was read from never shows


def test_strict_stops_and_keeps_previous_output(bad_jsonl, tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("previous run\n")
    with pytest.raises(NanodataError, match=r"mixed.jsonl:2: invalid JSON.*--strict"):
        chunk_to_jsonl(out, inputs=[bad_jsonl], strict=True)
    assert out.read_text() == "previous run\n"
    assert not out.with_name("out.jsonl.tmp").exists()


def test_huge_single_line_and_empty_files_skipped(tmp_path):
    huge = tmp_path / "huge.jsonl"
    with open(huge, "w") as f:  # a 50 MB line: never held whole, skipped and counted
        f.write('{"text": "')
        f.write("x" * (50 * 1024 * 1024))
        f.write('"}\n')
        f.write(json.dumps({"text": "int ok() { return 0; }"}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[huge, empty], max_file_bytes=1_000_000)
    assert any(p.startswith(f"{huge}:1: line longer") for p in summary["problems"])
    assert any(p == f"{empty}: empty input file" for p in summary["problems"])
    assert summary["files_read"] == 1 and summary["files_skipped"] == 2
    assert read_docs(tmp_path / "out.jsonl")[0]["text"] == "int ok() { return 0; }\n"


def test_nothing_usable_is_an_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(NanodataError, match="no usable C\\+\\+ input.*empty input file"):
        chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[empty])
    with pytest.raises(NanodataError, match="no usable.*does not exist"):
        chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[tmp_path / "missing"])
    assert not (tmp_path / "out.jsonl").exists() and not (tmp_path / "out.jsonl.tmp").exists()


def test_finding_no_file_says_where_it_looked_and_for_what(tmp_path):
    (tmp_path / "tree" / "docs").mkdir(parents=True)
    (tmp_path / "tree" / "docs" / "README.md").write_text("no C++ here\n")
    (tmp_path / "tree" / "a.c").write_text("int f(void) { return 1; }\n")  # not one of the --extensions
    blank = _write_lines(tmp_path / "blank.jsonl", [b"", b""])
    done = subprocess.run([NANODATA, "chunk", "--no-progress", "--project-dirs", str(tmp_path / "tree"),
                           "--extensions", "cc,h", "--output", str(tmp_path / "out.jsonl")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"no C++ files (extensions .cc,.h) under {tmp_path / 'tree'}" in done.stderr, done.stderr
    with pytest.raises(NanodataError, match=f"no docs in {blank}$"):
        chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[blank])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blank.jsonl", "tree"]


@pytest.mark.parametrize("kwargs, match", [
    ({"max_tokens": 15}, "--max-tokens must be a whole number >= 16 and <= 1048576, not 15"),
    ({"mode": "fancy"}, "--mode 'fancy'"),
    ({"inputs": ()}, "nothing to chunk"),
])
def test_bad_parameters(tmp_path, kwargs, match):
    args = {"inputs": [write_jsonl(tmp_path / "in.jsonl", [GOOD])], **kwargs}
    with pytest.raises(NanodataError, match=match):
        chunk_to_jsonl(tmp_path / "out.jsonl", **args)


@pytest.mark.parametrize("argv, words", [
    (["--partition-mb", "nan"], "argument --partition-mb: nan is out of range: must be a finite number > 0"),
    (["--partition-mb", "0"], "argument --partition-mb: 0 is out of range: must be a finite number > 0"),
    (["--project-dirs", "{tmp}", "--extensions", ","], "no file extension given for --project-dirs"),
    (["--inputs", "{tmp}"], "is a directory; give JSONL files"),
    (["--output", "{tmp}/in.jsonl"], "is also an input"),
    (["--output", "{tmp}/in.jsonl/out.jsonl"], "in.jsonl is a file, not a directory"),
    (["--output", "{tmp}"], "is a directory; give the path of a .jsonl file"),
    (["--workers", "0"], "argument --workers: 0 is out of range: must be a whole number >= 1"),
    (["--tokenizer", "no-such-encoding"], "tokenizer 'no-such-encoding'"),
])
def test_cli_mistakes_are_one_line_before_any_work(tmp_path, argv, words):
    write_jsonl(tmp_path / "in.jsonl", [GOOD])
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    defaults = {"--inputs": str(tmp_path / "in.jsonl"), "--output": str(tmp_path / "out" / "docs.jsonl")}
    for option, value in defaults.items():
        if option not in argv:
            argv = [option, value, *argv]
    done = subprocess.run([NANODATA, "chunk", "--no-progress", *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out").exists()  # nothing written, not even the output's directory
    assert (tmp_path / "in.jsonl").read_text().count("\n") == 1


def test_project_walk_extensions_sizes_binaries_and_symlinks(tmp_path):
    root = tmp_path / "projects"
    (root / "p" / "src").mkdir(parents=True)
    (root / "p" / "src" / "a.cpp").write_text("int a() { return 1; }\n")
    (root / "p" / "src" / "B.HPP").write_text("struct B { int x; };\n")
    (root / "p" / "notes.txt").write_text("not C++")
    (root / "p" / "big.cc").write_text("int big() { return 0; }\n" + "// pad\n" * 200)
    (root / "p" / "blob.h").write_bytes(b"\x00\x01binary")
    (root / "p" / "latin1.h").write_bytes(b"int caf\xe9() { return 0; }\n")
    (root / "p" / "empty.h").write_bytes(b"")
    outside = tmp_path / "outside.cpp"
    outside.write_text("int secret() { return 42; }\n")
    os.symlink(outside, root / "p" / "escape.cpp")
    os.symlink(root / "p", root / "p" / "src" / "loop")            # a directory loop
    os.symlink(root / "p" / "src" / "a.cpp", root / "p" / "again.cpp")  # inside: listed once
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", project_dirs=[root], max_file_bytes=1000)
    sources = sorted(d["source"] for d in read_docs(tmp_path / "out.jsonl"))
    assert sources == ["p/src/B.HPP", "p/src/a.cpp"]
    assert "escape.cpp: symlink points outside" in "\n".join(summary["problems"])
    dropped = {reason: d["listed"] for reason, d in summary["cleaning"]["dropped"].items()}
    assert [d["file"] for d in dropped["binary"]] == ["p/blob.h"]
    assert dropped["undecodable"][0]["file"] == "p/latin1.h" and "line 1" in dropped["undecodable"][0]["figure"]
    assert [d["file"] for d in dropped["empty"]] == ["p/empty.h"]
    assert summary["too_big"] == [{"file": str(root / "p" / "big.cc"), "bytes": 1424}]
    assert summary["files_too_big"] == 1 and summary["max_file_bytes"] == 1000
    assert summary["files_read"] == 5 and summary["files_dropped"] == 3
    assert summary["files_failed"] == 0 and summary["files_skipped"] == 2


def test_append_mode_and_done_marker(tmp_path):
    out = tmp_path / "stream.jsonl"
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD])
    chunk_to_jsonl(out, inputs=[src])
    first = out.read_text()
    summary = chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in2.jsonl", ["int z() { return 9; }"])], append=True)
    assert out.read_text().startswith(first) and out.read_text().endswith('"kind": "file"}\n')
    done = json.loads(out.with_name("stream.jsonl.done").read_text())
    assert done["docs"] == summary["docs"] == 1


def test_append_removes_the_previous_done_marker_before_its_first_write(tmp_path, monkeypatch):
    from nanodata.pipeline.chunkbuild import writer

    out = tmp_path / "stream.jsonl"
    chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in.jsonl", [GOOD])])
    seen_markers = []
    real_write = writer.JsonlWriter._write

    def spy(self, docs):
        seen_markers.append(self.done.exists())
        return real_write(self, docs)

    monkeypatch.setattr(writer.JsonlWriter, "_write", spy)  # where direct and staged (near-dedup) docs meet
    chunk_to_jsonl(out, inputs=[write_jsonl(tmp_path / "in2.jsonl", ["int z() { return 9; }"])], append=True)
    assert seen_markers and not any(seen_markers)  # a --follow reader cannot stop on the old marker
    assert out.with_name("stream.jsonl.done").exists()


def test_killed_append_rerun_writes_what_one_clean_append_writes(tmp_path):
    """kill -9 an appending run mid-way (after some docs are on disk); the re-run leaves no duplicates."""
    import signal
    import subprocess
    import sys
    import time

    texts = [f"int f{i}(int v) {{ return v * {i}; }}\n" * 3 for i in range(4000)]
    src = write_jsonl(tmp_path / "in.jsonl", texts)
    base = write_jsonl(tmp_path / "base.jsonl", [GOOD])
    clean, crashed = tmp_path / "clean.jsonl", tmp_path / "crashed.jsonl"
    for out in (clean, crashed):
        chunk_to_jsonl(out, inputs=[base])
    chunk_to_jsonl(clean, inputs=[src], append=True)
    before = crashed.stat().st_size
    cmd = [sys.executable, "-m", "nanodata.cli", "chunk", "--inputs", str(src), "--output", str(crashed),
           "--append", "--no-progress"]
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 60
    while crashed.stat().st_size < before + 20_000 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert before < crashed.stat().st_size < clean.stat().st_size  # killed half-way through its append
    assert subprocess.run(cmd).returncode == 0
    assert crashed.read_bytes() == clean.read_bytes()
    assert not crashed.with_name("crashed.jsonl.append").exists()


def test_exact_duplicates_dropped(tmp_path):
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD, "int h() { return 2; }", GOOD])
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[src], dedup="exact")
    texts = [d["text"] for d in read_docs(tmp_path / "out.jsonl")]
    assert summary["duplicates_dropped"] == 1 and summary["docs"] == len(texts) == len(set(texts)) == 2
    # near-dedup (the default) removes the second file first: same docs, none left for exact dedupe to drop
    near = chunk_to_jsonl(tmp_path / "near.jsonl", inputs=[src])
    assert (tmp_path / "near.jsonl").read_bytes() == (tmp_path / "out.jsonl").read_bytes()
    assert near["duplicates_dropped"] == 0 and near["near_duplicates"]["files_removed"] == 1


def test_cli_runs_and_reports(tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [GOOD, "int broken( {"])
    out = tmp_path / "out.jsonl"
    code = main(["chunk", "--inputs", str(src), "--output", str(out), "--mode", "compilable",
                 "--max-tokens", "128", "--workers", "2", "--no-progress"])
    line = capsys.readouterr().out
    assert code == 0 and "chunk compilable: 2 files read" in line and "1 with syntax errors" in line
    assert "files/s" in line and "MB/s" in line
    assert all(d["n_tokens"] <= 128 for d in read_docs(out))
    assert main(["chunk", "--inputs", str(src), "--output", str(out), "--max-tokens", "8"]) == 2
    assert "argument --max-tokens: 8 is out of range: must be a whole number >= 16" in capsys.readouterr().err
    assert main(["chunk", "--project-dirs", str(tmp_path / "nope"), "--output", str(out), "--no-progress"]) == 2
    assert "project directory does not exist" in capsys.readouterr().err


def test_output_naming_a_directory_fails_before_any_work(tmp_path):
    with pytest.raises(NanodataError, match=r"--output .*: is a directory"):
        chunk_to_jsonl(tmp_path, inputs=[write_jsonl(tmp_path / "in.jsonl", [GOOD])])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_big_files_are_chunked_by_default(tmp_path):
    """No size limit unless one is given: a 600 KB file (over the old 500,000-byte default) of a tree and as one
    JSONL record (a line longer than the old line bound of 8 x that default would be with a 500 KB file) is
    just more docs, every function in them."""
    text = "".join(f"int big_{i}(int x) {{ return x * {i} + {i % 7}; }}\n" for i in range(14_000))
    assert len(text) > 600_000
    (tmp_path / "tree" / "p").mkdir(parents=True)
    (tmp_path / "tree" / "p" / "big.cc").write_text(text)
    records = write_jsonl(tmp_path / "in.jsonl", [text.replace("big_", "rec_")])
    summary = chunk_to_jsonl(tmp_path / "out.jsonl", inputs=[records], project_dirs=[tmp_path / "tree"],
                             max_tokens=4096)
    assert summary["files_read"] == 2 and summary["files_skipped"] == 0 and summary["too_big"] == []
    assert summary["max_file_bytes"] is None
    docs = "".join(d["text"] for d in read_docs(tmp_path / "out.jsonl"))
    assert all(f"int {p}_{i}(" in docs for p in ("big", "rec") for i in range(0, 14_000, 997))
    assert docs.count("\n") == 2 * text.count("\n")  # every line, once
