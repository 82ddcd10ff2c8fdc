"""Where C++ text comes from: JSONL records or project directories.

Both yield `SourceFile`s in a deterministic order and report every unusable input as a
`Problem` (one line naming the file and line) instead of raising, so a run goes on past bad
input and the caller decides (strict or not) what a problem costs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

CPP_EXTENSIONS = (".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".ipp", ".tcc")
BINARY_SNIFF_BYTES = 8192
# A JSON line may escape text (\uXXXX is 6 bytes per char), so lines get more room than files.
LINE_SLACK = 8
READ_BLOCK = 1 << 20


@dataclass
class SourceFile:
    source: str                 # what output docs name: "repo/path", a relative path, or "input.jsonl:LINE"
    project: str                # project name: a project dir's sub-directory, a record's repo, or the input
    path: str                   # path used to resolve #include (relative, "/"-separated)
    text: str | None = None     # JSONL records carry their text...
    file: str | None = None     # ...project files are read by the worker that parses them
    size: int = 0


@dataclass
class Problem:
    where: str                  # "file" or "file:line"
    reason: str
    status: str = "failed"      # "failed" (unusable input) or "skipped" (by policy: size, binary, empty)

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


@dataclass
class Listing:
    files: list[SourceFile] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def _read_lines(path: Path, max_line_bytes: int):
    """Yield (line_number, bytes | None); None marks a line longer than max_line_bytes (not kept in memory)."""
    with open(path, "rb") as f:
        number = 0
        while True:
            line = f.readline(max_line_bytes + 1)
            if not line:
                return
            number += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # drain the rest of the oversized line
                    line = f.readline(READ_BLOCK)
                yield number, None
                continue
            yield number, line


def read_jsonl(path: str | os.PathLike, max_file_bytes: int, out: Listing) -> None:
    """Append one SourceFile per usable `{"text": ...}` line; every other line becomes a Problem."""
    path = Path(path)
    if not path.is_file():
        out.problems.append(Problem(str(path), "input file does not exist"))
        return
    n_lines = 0
    for number, raw in _read_lines(path, LINE_SLACK * max_file_bytes + 4096):
        n_lines += 1
        where = f"{path}:{number}"
        if raw is None:
            out.problems.append(Problem(where, f"line longer than {LINE_SLACK} x --max-file-bytes, skipped", "skipped"))
            continue
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.problems.append(Problem(where, f"not UTF-8 (byte {exc.start})"))
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            out.problems.append(Problem(where, f"invalid JSON: {exc.msg} (column {exc.colno})"))
            continue
        if not isinstance(record, dict) or "text" not in record:
            out.problems.append(Problem(where, 'no "text" key (expected a JSON object like {"text": "..."})'))
            continue
        text = record["text"]
        if not isinstance(text, str):
            out.problems.append(Problem(where, f'"text" is {type(text).__name__}, expected a string'))
            continue
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_file_bytes:
            out.problems.append(Problem(where, f"text of {size} bytes exceeds --max-file-bytes {max_file_bytes}",
                                        "skipped"))
            continue
        if not text.strip():
            out.problems.append(Problem(where, "empty text", "skipped"))
            continue
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates from \ud800-style escapes
            out.problems.append(Problem(where, "text holds invalid unicode (lone surrogate escapes)"))
            continue
        rel = str(record.get("path") or "")
        repo = str(record.get("repo") or "")
        source = "/".join(p for p in (repo, rel) if p) or where
        out.files.append(SourceFile(source=source, project=repo or (rel.split("/")[0] if "/" in rel else str(path)),
                                    path=rel or source, text=text, size=size))
    if n_lines == 0:
        out.problems.append(Problem(str(path), "empty input file", "skipped"))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def walk_project_dirs(root: str | os.PathLike, extensions: tuple[str, ...], max_file_bytes: int,
                      out: Listing) -> None:
    """Each sub-directory of `root` is a project (files directly in root form a project named after root).

    Symlinks are never followed: one pointing outside the tree is skipped and counted, one
    pointing inside names a file or directory the walk reaches anyway (so no loops, no duplicates).
    """
    root = Path(root)
    if not root.is_dir():
        out.problems.append(Problem(str(root), "project directory does not exist"))
        return
    real_root = os.path.realpath(root)
    found: list[tuple[str, Path]] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            out.problems.append(Problem(str(directory), f"unreadable directory: {exc.strerror}"))
            continue
        for entry in entries:
            if entry.is_symlink():
                if not _inside(os.path.realpath(entry.path), real_root):
                    out.problems.append(Problem(entry.path, "symlink points outside the project tree", "skipped"))
            elif entry.is_dir():
                stack.append(Path(entry.path))
            elif entry.name.lower().endswith(extensions) and entry.is_file():
                found.append((Path(entry.path).relative_to(root).as_posix(), Path(entry.path)))
    for rel, file in sorted(found):
        size = file.stat().st_size
        project = rel.split("/")[0] if "/" in rel else root.name
        if size > max_file_bytes:
            out.problems.append(Problem(str(file), f"{size} bytes exceeds --max-file-bytes {max_file_bytes}",
                                        "skipped"))
            continue
        out.files.append(SourceFile(source=f"{root.name}/{rel}", project=project, path=rel, file=str(file), size=size))


def load_text(src: SourceFile) -> tuple[str | None, Problem | None]:
    """The file's text, or why it cannot be used (binary, not UTF-8, empty, unreadable)."""
    if src.text is not None:
        return src.text, None
    try:
        data = Path(src.file).read_bytes()
    except OSError as exc:
        return None, Problem(src.file, f"unreadable: {exc.strerror}")
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return None, Problem(src.file, "binary file (NUL bytes)", "skipped")
    if not data.strip():
        return None, Problem(src.file, "empty file", "skipped")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return None, Problem(f"{src.file}:{line}", f"not UTF-8 (byte offset {exc.start})")
