"""Where C++ text comes from: JSONL records (plain, .gz, .zst; local or gs://) or project trees.

Everything here streams: records are read line by line from a (decompressing) stream, project
trees are walked lazily, so no input is ever held whole. Every item gets a *gid*, its position
in the run's input order (input number, then line or file number), which is what makes output
independent of how the work is cut: a partition is a range of items, and items keep their gid,
source name and line number whichever partition reads them.

Unusable inputs come out as `Problem`s (one line naming the file and line) instead of raising,
so a run goes on past bad input and the caller decides (strict or not) what a problem costs. What a file's
text holds (empty, binary, not UTF-8, generated, ...) is judged later, by the filters of
nanodata.pipeline.cleaning, in the worker that reads it: text that is not UTF-8 arrives here decoded with
surrogate escapes, so the `undecodable` filter sees it and names where.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import msgspec

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.pipeline.cleaning.licenses import NOASSERTION, detect_license, license_files
from nanodata.storage.files import crc32c_name, object_digest

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
# A JSON line may escape text (\uXXXX is 6 bytes per char), so lines get more room than files.
LINE_SLACK = 8
READ_BLOCK = 1 << 20
ITEM_BITS = 40  # gid = input number << ITEM_BITS | line or file number


def gid_of(input_no: int, item_no: int) -> int:
    return (input_no << ITEM_BITS) | item_no


@dataclass
class SourceFile:
    gid: int                    # position in the run's input order
    source: str                 # what output docs name: "repo/path", "root/rel/path" or "input.jsonl:LINE"
    project: str                # project name: a tree's sub-directory, a record's repo, or the input's name
    path: str                   # path used to resolve #include (relative, "/"-separated)
    text: str | None = None     # JSONL records carry their text...
    file: str | None = None     # ...project files are read (local path or gs:// URI) by the worker parsing them
    size: int = 0
    license: str = NOASSERTION  # its project's SPDX id (a tree's license files), or its record's "license"
    digest: str | None = None   # its content digest, when planned (reuse.text_content_digest's; a cache hit reads nothing)
    line: bytes | None = None   # a planned record's JSONL line in place of its text: parsed only if its entry misses


@dataclass
class Problem:
    where: str                  # "file" or "file:line"
    reason: str
    status: str = "failed"      # "failed" (unusable input) or "skipped" (by policy: size, binary, empty)
    size: int | None = None     # the bytes of a file skipped for being over --max-file-bytes

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def is_jsonl(uri: str) -> bool:
    return uri.lower().endswith(JSONL_SUFFIXES)


def input_name(uri: str) -> str:
    """The name docs carry for an input: its file name (where it was downloaded to never matters)."""
    return uri.rstrip("/").rsplit("/", 1)[-1]


# ---------------------------------------------------------------- JSONL records

def _read_lines(stream, max_line_bytes: int | None):
    """Yield (bytes, line length) per line; bytes is None for a line longer than max_line_bytes (never held).
    Without a bound a line is read whole (one record, which is decoded whole anyway), never more than one."""
    while True:
        line = stream.readline(-1 if max_line_bytes is None else max_line_bytes + 1)
        if not line:
            return
        if max_line_bytes is not None and len(line) > max_line_bytes and not line.endswith(b"\n"):
            length = len(line)
            while line and not line.endswith(b"\n"):  # drain the rest of the oversized line
                line = stream.readline(READ_BLOCK)
                length += len(line)
            yield None, length
            continue
        yield line, len(line)


def too_big(where: str, size: int, max_file_bytes: int | None) -> Problem | None:
    """The Problem of a file over the user's --max-file-bytes (None: no limit, the default)."""
    if max_file_bytes is None or size <= max_file_bytes:
        return None
    return Problem(where, f"{size} bytes exceeds --max-file-bytes {max_file_bytes}", "skipped", size)


class _Record(msgspec.Struct):
    """What the chunker reads of a JSONL record; its other fields are skipped (checked as JSON, never built)."""
    text: object = msgspec.UNSET
    path: object = None
    repo: object = None
    license: object = None


_RECORD = msgspec.json.Decoder(_Record)  # ~3x json.loads on a record: the plan of a rebuild decodes every one


def record_fields(raw: bytes, where: str):
    """A JSONL line's record: (text, its UTF-8 bytes, path, repo, license); a Problem for a line that is not one,
    None for a blank line."""
    if not raw or raw.isspace():  # (strip would copy the line)
        return None
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Problem(where, f"not UTF-8 (byte {exc.start})")
    try:
        record = _RECORD.decode(raw)
    except msgspec.DecodeError:  # json names what is wrong, or takes what msgspec refuses (NaN, a lone surrogate)
        try:
            loaded = json.loads(line)
        except json.JSONDecodeError as exc:
            return Problem(where, f"invalid JSON: {exc.msg} (column {exc.colno})")
        record = msgspec.convert(loaded, _Record) if isinstance(loaded, dict) else None
    if record is None or record.text is msgspec.UNSET:
        return Problem(where, 'no "text" key (expected a JSON object like {"text": "..."})')
    text = record.text
    if not isinstance(text, str):
        return Problem(where, f'"text" is {type(text).__name__}, expected a string')
    return (text, len(text.encode("utf-8", "surrogatepass")), str(record.path or ""), str(record.repo or ""),
            str(record.license or NOASSERTION))


def line_check(raw: bytes) -> str:
    """What tells a planned line from another one in its place (the input changed since): its length and crc32c."""
    return f"{len(raw)}:{crc32c_name(raw)}"


def _record(raw: bytes, where: str, name: str, number: int, gid: int, max_file_bytes: int | None,
            planned: list | None = None):
    """One JSONL line -> SourceFile, Problem, or None (a blank line). planned: what the plan took of this line when
    it was a record ([line_check, content digest, then record_fields' less its text]): the line is then parsed only
    if its entry misses (load_text), unless it is not the line planned."""
    if planned is not None and planned[0] == line_check(raw):
        text, digest, (size, rel, repo, license) = None, planned[1], planned[2:]
    else:
        fields = record_fields(raw, where)
        if not isinstance(fields, tuple):
            return fields
        (text, size, rel, repo, license), digest = fields, None
    if problem := too_big(where, size, max_file_bytes):
        return problem
    source = "/".join(p for p in (repo, rel) if p) or f"{name}:{number}"
    project = repo or name  # a record without a repo belongs to its input file
    return SourceFile(gid, source, project, rel or source, text=text, size=size, license=license, digest=digest,
                      line=None if text is not None else raw)


def jsonl_items(uri: str, input_no: int, max_file_bytes: int | None, *, display: str | None = None,
                start: int = 0, stop: int | None = None, first_line: int = 1, planned: list | None = None):
    """SourceFile or Problem per line of a JSONL input, or of the line-aligned range [start, stop) of it.

    A range is read from `uri` as plain bytes (the decompressed file a plan wrote, or a byte
    range of an uncompressed input); the whole input is read through its decompressor. planned: as stream_items'."""
    display = display or uri
    whole = start == 0 and stop is None
    try:
        stream = storage.open_decompressed(uri) if whole else storage.open_read(uri, start, stop)
    except NanodataError as exc:  # missing, a directory, unreadable: counted like any bad input
        yield Problem(display, str(exc).removeprefix(f"{uri}: "))
        return
    yield from stream_items(stream, display, input_no, max_file_bytes, first_line=first_line, first=start == 0,
                            planned=planned)


def stream_items(stream, display: str, input_no: int, max_file_bytes: int | None, *, first_line: int = 1,
                 first: bool = True, planned: list | None = None):
    """SourceFile or Problem per line of an open stream of JSONL (closed at the end), its first line numbered
    `first_line`; first: the stream starts at the input's start (an input with no line at all is a Problem).
    planned: what the plan took of each line (_record's `planned`, None for a line that was no record)."""
    name = input_name(display)
    number = first_line - 1
    max_line = None if max_file_bytes is None else LINE_SLACK * max_file_bytes + 4096
    with stream:
        try:
            for raw, _ in _read_lines(stream, max_line):
                number += 1
                where = f"{display}:{number}"
                if raw is None:
                    yield Problem(where, f"line longer than {LINE_SLACK} x --max-file-bytes, skipped", "skipped")
                    continue
                at = number - first_line
                item = _record(raw, where, name, number, gid_of(input_no, number), max_file_bytes,
                               planned[at] if planned is not None and at < len(planned) else None)
                if item is not None:
                    yield item
        except storage.decompression_errors() as exc:  # a corrupt or truncated .gz / .zst
            yield Problem(f"{display}:{number + 1}", f"cannot decompress: {exc}")
            return
    if first and first_line == 1 and number == 0:
        yield Problem(display, "empty input file", "skipped")


def split_at_lines(stream, first_cut: float, every: float, weigh=None):
    """Cut a byte stream into line-aligned ranges, streaming: yield (data, range) pairs where `data` is
    the stream's next bytes and `range`, when not None, is the (start, stop, first_line, weight) of a range
    ending with them. The first range ends at the first line end where its weight reaches `first_cut`, each later
    one where its own reaches `every`; an empty stream is one empty range. A range weighs its bytes, or, given
    weigh(line) -> a line's weight, the sum of its lines' (read line by line then)."""
    if weigh is not None:
        yield from _split_weighed(stream, first_cut, every, weigh)
        return
    start, first_line, pos, lines, target = 0, 1, 0, 0, first_cut
    while block := stream.read(READ_BLOCK):
        i = 0
        while (rel := max(math.ceil(target) - 1 - pos, i)) < len(block):
            newline = block.find(b"\n", rel)
            if newline < 0:
                break
            lines += block.count(b"\n", i, newline + 1)
            stop = pos + newline + 1
            yield block[i:newline + 1], (start, stop, first_line, stop - start)
            start, first_line, target, i = stop, lines + 1, stop + every, newline + 1
        lines += block.count(b"\n", i)
        yield block[i:], None
        pos += len(block)
    if pos > start or pos == 0:
        yield b"", (start, pos, first_line, pos - start)


def _split_weighed(stream, first_cut: float, every: float, weigh):
    start = pos = 0
    first_line = line = 1  # the range's first line; the next line's number
    weight, target = 0, first_cut
    for data in _lines(stream):
        pos += len(data)
        line += 1
        weight += weigh(data)
        if weight >= target:
            yield data, (start, pos, first_line, weight)
            start, first_line, weight, target = pos, line, 0, every
        else:
            yield data, None
    if pos > start or pos == 0:
        yield b"", (start, pos, first_line, weight)


def _lines(stream):
    """A stream's lines, each with its newline (the last may have none), read a block at a time."""
    pending: list[bytes] = []  # the pieces of the line the last blocks ended in
    while block := stream.read(READ_BLOCK):
        start = 0
        while (end := block.find(b"\n", start)) >= 0:  # each line sliced out once (split, then + b"\n": twice)
            line = block[start:end + 1]
            if pending:
                pending.append(line)
                line, pending = b"".join(pending), []
            yield line
            start = end + 1
        if start < len(block):
            pending.append(block[start:])
    if pending:
        yield b"".join(pending)


# ---------------------------------------------------------------- project trees

def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _local_tree(directory: str, prefix: str, extensions: tuple[str, ...], real_root: str):
    """(relative path, size) of C++ files under a directory in plain string order of the relative path, lazily.

    Sorting a directory's entries by name (name + "/" for directories) walks the tree in exactly
    the order of its full paths, which is also the order GCS lists objects in. Symlinks are never
    followed: one pointing outside the tree is reported, one pointing inside names a file or
    directory the walk reaches anyway (so no loops, no duplicates)."""
    try:
        entries = list(os.scandir(directory))
    except OSError as exc:
        yield Problem(directory, f"unreadable directory: {exc.strerror}"), 0
        return
    keyed = []
    for entry in entries:
        if entry.is_symlink():
            if not _inside(os.path.realpath(entry.path), real_root):
                keyed.append((entry.name, entry, "outside"))
        elif entry.is_dir():
            keyed.append((entry.name + "/", entry, "dir"))
        elif entry.name.lower().endswith(extensions) and entry.is_file():
            keyed.append((entry.name, entry, "file"))
    for key, entry, kind in sorted(keyed, key=lambda k: k[0]):
        if kind == "dir":
            yield from _local_tree(entry.path, prefix + key, extensions, real_root)
        elif kind == "outside":
            yield Problem(entry.path, "symlink points outside the project tree", "skipped"), 0
        else:
            yield prefix + key, entry.stat().st_size


def tree_files(root: str, extensions: tuple[str, ...]):
    """(relative path, size) of each C++ file under a local dir or gs:// prefix, in path order, streamed;
    a Problem in place of the pair for what cannot be walked."""
    for rel, size, _ in _tree_entries(root, extensions):
        yield rel, size


def hashed_tree_files(root: str, extensions: tuple[str, ...]):
    """tree_files with each file's content digest (storage.content_digest's, which a cache key uses): a local file
    is read once to hash it, a gs:// object's size and crc32c come with the listing (nothing downloaded)."""
    for rel, size, listed in _tree_entries(root, extensions):
        if isinstance(rel, Problem) or listed is not None:
            yield rel, size, listed
        else:
            yield rel, size, storage.content_digest(storage.join_uri(root, rel))


def _tree_entries(root: str, extensions: tuple[str, ...]):
    """(relative path, size, the digest its listing holds or None) of each C++ file, or (Problem, 0, None)."""
    if storage.parse_gs(root) is None:
        if not Path(root).is_dir():
            yield Problem(root, "project directory does not exist"), 0, None
            return
        for rel, size in _local_tree(root, "", extensions, os.path.realpath(root)):
            yield rel, size, None
        return
    bucket, prefix = storage.parse_gs(root.rstrip("/") + "/")
    blobs = storage.iter_blobs(bucket, prefix, f"list {root}")
    found = False
    for blob in blobs:  # pages are fetched as the iteration goes: the listing is never held whole
        rel = blob.name[len(prefix):]
        if rel.lower().endswith(extensions):
            found = True
            yield rel, int(blob.size), object_digest(blob.size, blob.crc32c)  # as storage.content_digest gives it
    if not found:
        yield Problem(root, "no C++ files under this prefix"), 0, None


def tree_item(root: str, rel: str, size: int, gid: int, max_file_bytes: int | None, digest: str | None = None):
    """The SourceFile (or size Problem) of one file of a project tree (digest: its content's, when planned)."""
    root_name = input_name(root)
    file = storage.join_uri(root, rel)
    if problem := too_big(file, size, max_file_bytes):
        return problem
    project, _, inner = rel.partition("/")
    license = project_license(storage.join_uri(root, project) if inner else root)
    if not inner:
        project = root_name
    # "project/path": a tree's own location never shows, so a moved tree gives the same docs
    return SourceFile(gid, f"{project}/{inner or rel}", project, rel, file=file, size=size, license=license,
                      digest=digest)


@functools.lru_cache(maxsize=1024)
def project_license(directory: str) -> str:
    """The SPDX id of a project directory's license files (LICENSE, COPYING, ... at its top), NOASSERTION without
    any: read once per project and run."""
    if storage.parse_gs(directory) is None:
        try:
            names = sorted(entry.name for entry in os.scandir(directory) if entry.is_file())
        except OSError:
            return NOASSERTION
    else:
        bucket, prefix = storage.parse_gs(directory.rstrip("/") + "/")
        names = sorted(b.name[len(prefix):] for b in storage.iter_blobs(bucket, prefix, f"list {directory}", "/"))
    found = license_files(names)
    texts = [(storage.read_bytes(storage.join_uri(directory, name)) or b"").decode("utf-8", "replace") for name in found]
    return detect_license(texts) if texts else NOASSERTION


def tree_items(root: str, input_no: int, extensions: tuple[str, ...], max_file_bytes: int | None):
    """Each sub-directory of `root` is a project; files directly in root form a project named after root."""
    number = 0
    for rel, size in tree_files(root, extensions):
        if isinstance(rel, Problem):
            yield rel
            continue
        yield tree_item(root, rel, size, gid_of(input_no, number), max_file_bytes)
        number += 1


def load_text(src: SourceFile) -> tuple[str | None, Problem | None]:
    """The file's text (bytes that are not UTF-8 kept as surrogate escapes, for the `undecodable` filter), or why
    it cannot be read."""
    if src.text is not None:
        return src.text, None
    if src.line is not None:
        fields = record_fields(src.line, src.source)
        return (fields[0], None) if isinstance(fields, tuple) else (None, fields or Problem(src.source, "blank line"))
    try:
        data = storage.read_bytes(src.file)
    except OSError as exc:
        return None, Problem(src.file, f"unreadable: {exc.strerror or exc}")
    if data is None:
        return None, Problem(src.file, "file disappeared")
    return data.decode("utf-8", "surrogateescape"), None
