"""Read JSONL docs, also from a file another process is still writing: whole lines only, from an offset.

The published converter parsed whatever `readline()` returned, so a line caught half-written
crashed it. Here bytes are handed out only up to the last newline on disk; the rest waits for
the writer. The file is finished when its writer drops `X.jsonl.done` (checked before the last
read, so nothing written before the marker is missed), when it has not grown for
`idle_timeout` seconds, or at once when not following. Only then is a final line without a
newline handed out.

Blocks of whole lines are parsed by Arrow's JSON reader when they are clean and line by line
when they are not, so bad lines (not UTF-8, invalid JSON, missing/non-string/empty text, ...) are
reported by kind and line while clean input runs at C++ speed. A line gets the same verdict and
values on either path, so the output never depends on where the blocks were cut (a resumed run
cuts them elsewhere).
"""

from __future__ import annotations

import codecs
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from nanodata.errors import NanodataError

BLOCK = 4 << 20
POLL_SECONDS = 0.1


def done_marker(path: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(path)}.done")


def _wait_for_file(path: Path, follow: bool, idle_timeout: float) -> None:
    # a writer that writes to a temp name and renames (the chunker does) makes the file appear late
    deadline = time.monotonic() + idle_timeout
    while not path.is_file():
        if not follow:
            raise NanodataError(f"{path}: input file does not exist")
        if time.monotonic() > deadline:
            raise NanodataError(f"{path}: input file did not appear within --idle-timeout {idle_timeout}s")
        time.sleep(POLL_SECONDS)


def read_blocks(path: str | os.PathLike, offset: int = 0, *, follow: bool = False,
                idle_timeout: float = 60.0, block_size: int | None = None) -> Iterator[tuple[int, memoryview]]:
    """Yield (byte offset of the block, block of whole lines); every block but the file's last ends in a newline.
    A block is a view of what was read, up to its last newline (no copy of a few MB per block)."""
    path, block_size = Path(path), block_size or BLOCK
    _wait_for_file(path, follow, idle_timeout)
    marker = done_marker(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < offset:
            raise NanodataError(f"{path}: file has {size} bytes but the checkpoint is at byte {offset} "
                                f"(was the input replaced?); use a fresh --out")
        want, seen = block_size, offset  # seen: how far the file has been read
        last_growth = time.monotonic()
        while True:
            finished = not follow or marker.exists()  # before the read: data precedes the marker
            f.seek(offset)  # a partial last line is read again with what follows it (no copy joins them)
            start, block = offset, f.read(want)
            cut = block.rfind(b"\n") + 1
            if cut:
                yield offset, memoryview(block)[:cut]
                offset += cut
            grew = start + len(block) > seen
            if grew:
                seen, last_growth = start + len(block), time.monotonic()
            if len(block) == want:  # more is there: read on at once, a line longer than a block in one piece
                want = block_size if cut else want * 2
            elif not grew:  # at the end of what has been written
                if finished or time.monotonic() - last_growth > idle_timeout:
                    break
                time.sleep(POLL_SECONDS)
        if block[cut:]:  # the writer is done, so an unterminated last line is as complete as it gets
            yield offset, memoryview(block)[cut:]


def line_bounds(block: bytes | memoryview) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) byte positions of each line in a block; `end` is just past its newline."""
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10) + 1
    if len(block) and block[-1] != ord("\n"):
        ends = np.append(ends, len(block))
    starts = np.concatenate(([0], ends[:-1]))[:len(ends)]  # an empty block has no line, not one empty line
    return starts, ends


# ---------------------------------------------------------------- docs: lines → Arrow rows

# lines: the chunker's [first, last] lines of its source that a doc holds as written (null: none recorded)
SCHEMA = pa.schema([("text", pa.string()), ("n_tokens", pa.int64()), ("mode", pa.string()),
                    ("source", pa.string()), ("lines", pa.list_(pa.int64())), ("kind", pa.string())])
META_STR = ("mode", "source", "kind")  # the chunker's string metadata; n_tokens and lines are the other columns
# a superset of the characters str.strip() removes: a text made only of these might be "empty"
MAYBE_BLANK = r"^[\s\x{0b}\x{1c}-\x{1f}\x{85}\p{Z}]*$"


class BadLine(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(detail)
        self.kind = kind


@dataclass
class ParsedBlock:
    table: pa.Table  # the good rows, in line order
    lines: np.ndarray  # index (within the block) of the line each row came from
    bad: list[tuple[int, str, str]]  # (line index, kind, detail) of every bad line
    starts: np.ndarray  # byte position of each line in the block
    ends: np.ndarray  # just past each line's newline


def _parse_int(digits: str) -> int | float:
    # Python refuses to convert ints of over 4300 digits, which Arrow's reader skips in fields it ignores
    try:
        return int(digits)
    except ValueError:
        return float(digits)


def _load_line(line: bytes):
    try:
        decoded = line.decode("utf-8-sig")  # a byte order mark starting the line is skipped, as Arrow skips it
    except UnicodeDecodeError as exc:
        raise BadLine("not_utf8", f"byte {exc.start + 1} of the line is not UTF-8 ({exc.reason})") from None
    try:
        return json.loads(decoded, parse_int=_parse_int)
    except ValueError as exc:
        raise BadLine("invalid_json", str(exc)) from None


def parse_doc(line: bytes) -> tuple:
    """One JSONL line → a row in SCHEMA order; raises BadLine."""
    try:
        obj = _load_line(line)
    except RecursionError:
        # nested deeper than Python's parser goes: Arrow's reader (the fast path) has no such limit, so its
        # verdict is taken, and the line fares the same whichever path its block takes
        table = _parse_block_fast(line, np.zeros(1, dtype=np.int64))
        if table is None:
            raise BadLine("invalid_json", "nested too deeply for Python's JSON parser, and not a good doc") from None
        return tuple(table.to_pylist()[0].values())
    if not isinstance(obj, dict):
        raise BadLine("not_an_object", f"a JSON {type(obj).__name__}, not an object")
    if "text" not in obj:
        raise BadLine("missing_text", "no 'text' field")
    text = obj["text"]
    if not isinstance(text, str):
        raise BadLine("non_string_text", f"'text' is a JSON {type(text).__name__}")
    if not text.strip():
        raise BadLine("empty_text", "'text' is empty or whitespace")
    n_tokens = obj.get("n_tokens")
    if n_tokens is not None and (type(n_tokens) is not int or not 0 <= n_tokens < 2 ** 63):
        raise BadLine("bad_metadata", f"'n_tokens' is {n_tokens!r}, not a non-negative integer")
    meta = tuple(obj.get(key) for key in META_STR)
    for key, value in zip(META_STR, meta, strict=False):
        if value is not None and not isinstance(value, str):
            raise BadLine("bad_metadata", f"{key!r} is a JSON {type(value).__name__}, not a string")
    lines = obj.get("lines")
    if lines is not None and not (type(lines) is list and len(lines) == 2
                                  and all(type(n) is int and 0 <= n < 2 ** 63 for n in lines)):
        raise BadLine("bad_metadata", f"'lines' is {lines!r}, not [first, last] line numbers")
    try:
        for value in (text, *meta):
            if value is not None:
                value.encode()
    except UnicodeEncodeError:  # lone surrogates from \ud800-style escapes cannot be stored as UTF-8
        raise BadLine("invalid_unicode", "a string holds a lone surrogate") from None
    mode, source, kind = meta
    return text, n_tokens, mode, source, lines, kind


def rows_to_table(rows: list[tuple]) -> pa.Table:
    columns = list(zip(*rows, strict=False)) if rows else [[] for _ in SCHEMA]
    return pa.table([pa.array(col, type=field.type) for col, field in zip(columns, SCHEMA, strict=False)], schema=SCHEMA)


def _plain_lines(block: bytes | memoryview, starts: np.ndarray) -> bool:
    """Valid UTF-8, no blank line, no leading byte order mark. Arrow's reader checks none of these: it reads
    invalid UTF-8 into strings, and skips a blank line (or a BOM-only first line), so such a line next to a
    line holding two objects would pass its row count."""
    if bytes(block[:len(codecs.BOM_UTF8)]) == codecs.BOM_UTF8:
        return False
    # Arrow's UTF-8 check accepts what Python's decoder accepts, without making a str of the block
    whole = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(block)], dtype=np.int64)),
                                             pa.py_buffer(block))
    try:
        whole.validate(full=True)
    except pa.ArrowInvalid:
        return False
    # JSON whitespace is \t \n \r and space: a line of no byte above space is blank or never a good doc
    return bool((np.maximum.reduceat(np.frombuffer(block, dtype=np.uint8), starts) > 32).all())


def _parse_block_fast(block: bytes | memoryview, starts: np.ndarray) -> pa.Table | None:
    """Arrow's C++ JSON reader, accepted only when every line is a good doc (else None).

    Whatever it accepts, parse_doc accepts with the same values, so which path a line takes
    never changes the output."""
    if not _plain_lines(block, starts):
        return None
    try:
        table = pj.read_json(pa.BufferReader(block),
                             read_options=pj.ReadOptions(use_threads=False, block_size=max(len(block), 1 << 20)),
                             parse_options=pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    text = table.column("text")
    lines = table.column("lines")
    if (table.num_rows != len(starts)  # no line is blank, so this means one object per line
            or text.null_count
            or pc.any(pc.less(table.column("n_tokens"), 0)).as_py()
            or pc.any(pc.match_substring_regex(text, MAYBE_BLANK)).as_py()
            or not _two_line_numbers(lines)):
        return None
    return table


def _two_line_numbers(lines: pa.ChunkedArray) -> bool:
    """Every non-null `lines` value is two non-null, non-negative numbers (what parse_doc accepts)."""
    sizes = pc.list_value_length(lines)
    values = pc.list_flatten(lines)
    return (not pc.any(pc.not_equal(sizes, 2)).as_py() and not values.null_count
            and not pc.any(pc.less(values, 0)).as_py())


def parse_block(block: bytes | memoryview) -> ParsedBlock:
    """Parse a block of whole lines: the fast path for clean blocks, line by line otherwise."""
    starts, ends = line_bounds(block)
    table = _parse_block_fast(block, starts) if len(starts) else None
    if table is not None:
        return ParsedBlock(table, np.arange(len(starts)), [], starts, ends)
    rows, index, bad = [], [], []
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=False)):
        try:
            rows.append(parse_doc(bytes(block[start:end]).rstrip(b"\n")))
            index.append(i)
        except BadLine as exc:
            bad.append((i, exc.kind, str(exc)))
    return ParsedBlock(rows_to_table(rows), np.array(index, dtype=np.int64), bad, starts, ends)
