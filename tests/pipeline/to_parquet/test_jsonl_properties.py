"""Property tests of the JSONL readers (nanodata.pipeline.jsonl) and of to-parquet's bad-line accounting.

Whatever the bytes of a line, it comes out once: as a row holding its text exactly, or as a bad line with
its line number and kind; the same whichever block it is read in (a resumed run cuts blocks elsewhere),
and the same on Arrow's fast path and the line-by-line path.
"""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonl_corpus import file_bytes

import nanodata.pipeline.jsonl
from nanodata.errors import NanodataError
from nanodata.pipeline.jsonl import parse_block, read_blocks
from nanodata.pipeline.to_parquet import jsonl_to_parquet

UNKNOWN = None  # an arbitrary line's verdict: whatever the line read alone gets
NEVER_UTF8 = [0xC0, 0xC1, *range(0xF5, 0x100)]  # bytes that occur in no valid UTF-8 text

texts = st.text(min_size=1, max_size=30).filter(str.strip)
meta = st.fixed_dictionaries({}, optional={"n_tokens": st.integers(0, 2 ** 63 - 1) | st.none(),
                                           "mode": st.text(max_size=5) | st.none(), "source": st.text(max_size=5),
                                           "kind": st.text(max_size=5), "extra": st.integers() | st.lists(st.booleans()),
                                           "lines": st.lists(st.integers(0, 2 ** 63 - 1), min_size=2, max_size=2)
                                           | st.none()})
pad = st.sampled_from(["", " ", "\t", "  \t", "\r"])


def dumps(obj, ascii_only: bool) -> str:
    return json.dumps(obj, ensure_ascii=ascii_only)


@st.composite
def good(draw):
    text = draw(texts)
    doc = {"text": text, **draw(meta)}
    line = draw(pad) + dumps(doc, draw(st.booleans())) + draw(pad)
    prefix = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))  # a byte order mark is skipped
    return prefix + line.encode(), ("row", text)


@st.composite
def bad(draw):
    text = draw(texts)
    kind, line = draw(st.sampled_from([
        ("invalid_json", ""), ("invalid_json", "   "), ("invalid_json", "{cut"), ("invalid_json", "two"),
        ("not_utf8", "utf8"), ("not_an_object", "list"), ("missing_text", '{"txt": "x"}'),
        ("non_string_text", "number"), ("empty_text", "blank"), ("bad_metadata", "n_tokens"),
        ("bad_metadata", "mode"), ("bad_metadata", "lines"), ("invalid_unicode", '{"text": "a\\udc00b"}')]))
    doc = dumps({"text": text}, draw(st.booleans()))
    if line == "{cut":  # a strict prefix of an object is never JSON
        line = doc[:draw(st.integers(0, len(doc) - 1))]
    elif line == "two":
        line = doc + draw(st.sampled_from(["", " ", "\r"])) + doc
    elif line == "utf8":
        raw = doc.encode()
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + bytes([draw(st.sampled_from(NEVER_UTF8))]) + raw[at:], (kind,)
    elif line == "list":
        line = dumps([text], True)
    elif line == "number":
        line = dumps({"text": draw(st.integers() | st.booleans() | st.none())}, True)
    elif line == "blank":
        line = dumps({"text": draw(st.sampled_from(["", " ", "\n\t", "\u3000", "\x1c"]))}, True)
    elif line == "n_tokens":
        line = dumps({"text": text, "n_tokens": draw(st.sampled_from([-1, 1.5, "7", True, 2 ** 63, [1]]))}, True)
    elif line == "mode":
        line = dumps({"text": text, "mode": draw(st.sampled_from([1, True, ["x"], {"a": "b"}]))}, True)
    elif line == "lines":
        line = dumps({"text": text, "lines": draw(st.sampled_from([[], [1], [1, 2, 3], [1, None], [-1, 2], [1.5, 2],
                                                                    "12", [True, 1], [1, 2 ** 63], {"a": 1}, 7]))},
                     True)
    return line.encode(), (kind,)


# lines Python's parser and Arrow's reader see differently: both paths must still agree on them
edge = st.sampled_from([
    (b'{"text": "deep", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", ("row", "deep")),
    (b'{"text": "big", "x": 1' + b"0" * 5000 + b"}", ("row", "big")),
    (b'{"text": "a", "text": "dup"}', ("row", "dup")),
    (b'{"text": "x", "n_tokens": 1, "n_tokens": null}', ("row", "x")),
    (b'{"text": "nan", "x": NaN}', ("row", "nan")),
    (b'{"text": "ctl\x01"}', ("invalid_json",)),
    (b'{"text": "\xed\xa0\x80"}', ("not_utf8",)),  # a surrogate written as UTF-8 bytes
])
# neighbours that cancel out in a count of rows: a line Arrow skips (blank, or a byte order mark alone at the
# start of a block) and a line where it reads two objects
TWO = (b'{"text": "one"} {"text": "two"}', ("invalid_json",))
BOM_ALONE = (b"\xef\xbb\xbf", ("invalid_json",))
pairs = st.sampled_from([[TWO, (b"", ("invalid_json",))], [(b" \t", ("invalid_json",)), TWO], [BOM_ALONE, TWO]])
arbitrary = st.binary(max_size=40).map(lambda b: (b.replace(b"\n", b""), UNKNOWN))
one = st.one_of(good(), good(), bad(), edge, arbitrary).map(lambda line: [line])
lines = st.lists(st.one_of(one, one, one, pairs), min_size=1, max_size=25).map(lambda groups: sum(groups, []))


def jsonl_bytes(lines: list[bytes], crlf: bool, final_newline: bool) -> bytes:
    end = b"\r\n" if crlf else b"\n"
    data = end.join(lines) + end
    return data if final_newline else data[:-1]


def expected(lines, crlf: bool, final_newline: bool) -> list[tuple]:
    """(kind,) or ('row', text) per line of the file; a trailing empty line without its newline is no line."""
    verdicts = [v for _, v in lines]
    if not final_newline and lines[-1][0] == b"" and not crlf:
        verdicts.pop()
    return verdicts


def read_all(path: Path, block_size: int | None) -> list[tuple]:
    """One verdict per line, in order, reading `path` in blocks of about block_size bytes."""
    verdicts, offset = [], 0
    for start, block in read_blocks(path, block_size=block_size):
        assert start == offset
        offset += len(block)
        parsed = parse_block(block)
        rows = dict(zip(parsed.lines.tolist(), parsed.table.column("text").to_pylist(), strict=False))
        bad = {i: (kind,) for i, kind, detail in parsed.bad}
        for _, _, detail in parsed.bad:
            assert "\n" not in detail
        assert not rows.keys() & bad.keys() and len(rows) + len(bad) == len(parsed.starts)
        verdicts += [("row", rows[i]) if i in rows else bad[i] for i in range(len(parsed.starts))]
    assert offset == path.stat().st_size
    return verdicts


def alone(line: bytes) -> tuple:
    """A line's verdict read on its own, on the fast path and on the line-by-line path (a bad line next to it)."""
    fast = parse_block(line + b"\n")
    slow = parse_block(line + b"\n{\n")
    verdict = ("row", fast.table.column("text")[0].as_py()) if fast.table.num_rows else (fast.bad[0][1],)
    assert slow.bad[-1][0] == 1
    assert verdict == (("row", slow.table.column("text")[0].as_py()) if slow.table.num_rows else (slow.bad[0][1],))
    return verdict


def test_an_empty_block_has_no_line():
    parsed = parse_block(b"")
    assert not len(parsed.starts) and not len(parsed.ends) and not parsed.table.num_rows and not parsed.bad


@settings(max_examples=150, deadline=None)
@given(lines, st.booleans(), st.booleans(), st.integers(1, 300))
@example([BOM_ALONE, TWO], False, True, 300)  # the pair where Arrow's reader is at its most lenient: a block start
def test_every_line_comes_out_once_whatever_the_block_size(lines, crlf, final_newline, block_size):
    want = expected(lines, crlf, final_newline)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.jsonl"
        path.write_bytes(jsonl_bytes([line for line, _ in lines], crlf, final_newline))
        whole = read_all(path, None)
        assert read_all(path, block_size) == whole
    assert len(whole) == len(want)
    for (line, _), verdict, got in zip(lines, want, whole, strict=False):
        assert got == (verdict or alone(line + (b"\r" if crlf else b""))), line


@settings(max_examples=40, deadline=None)
@given(lines, st.booleans(), st.integers(1, 200))
def test_to_parquet_accounting_is_exact_and_block_size_free(lines, crlf, block_size):
    """Manifest counts and line numbers are the expected ones, the bytes do not depend on the block size,
    and --on-error fail names the first bad line; any failure is one line."""
    verdicts = [v or alone(line + (b"\r" if crlf else b"")) for line, v in lines]
    bad_at = [n for n, v in enumerate(verdicts, 1) if v[0] != "row"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docs.jsonl"
        path.write_bytes(jsonl_bytes([line for line, _ in lines], crlf, True))
        kw = {"rows_per_file": 3, "row_group_size": 2, "val_fraction": 0.2}
        results = []
        for i, block in enumerate((nanodata.pipeline.jsonl.BLOCK, block_size)):
            saved, nanodata.pipeline.jsonl.BLOCK = nanodata.pipeline.jsonl.BLOCK, block
            try:
                results.append(jsonl_to_parquet([path], Path(tmp) / f"out{i}", **kw))
            except NanodataError as exc:
                assert "\n" not in str(exc) and "no good doc" in str(exc) and len(bad_at) == len(verdicts)
                results.append(str(exc).replace(f"out{i}", "out"))
            finally:
                nanodata.pipeline.jsonl.BLOCK = saved
        assert results[0] == results[1]
        if isinstance(results[0], dict):
            assert file_bytes(Path(tmp) / "out0") == file_bytes(Path(tmp) / "out1")
            where = {}
            for n in bad_at:
                where.setdefault(verdicts[n - 1][0], []).append(f"{path}:{n}")
            assert results[0]["bad_lines"] == {kind: {"count": len(at), "first_lines": at[:5]}
                                               for kind, at in where.items()}
            assert results[0]["total_rows"] == len(verdicts) - len(bad_at)
        if bad_at:
            with pytest.raises(NanodataError) as failed:
                jsonl_to_parquet([path], Path(tmp) / "fail", on_error="fail", **kw)
            assert f"{path}:{bad_at[0]}: " in str(failed.value) and "\n" not in str(failed.value)


UTF8_EDGES = [b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xc0\x80", b"\xc2\x80", b"\xe0\x80\x80", b"\xf4\x8f\xbf\xbf",
              b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xe2\x82", b"\xf0\x9f\x98\x80", b"\xef\xbb\xbf", b"\x00"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(UTF8_EDGES) | st.binary(max_size=6), max_size=8))
def test_the_utf8_check_of_the_fast_path_is_pythons(pieces):
    """A block goes to Arrow's reader only when Python could decode it: surrogates, overlong forms, code points
    above U+10FFFF and cut sequences are refused by both checks alike."""
    block = b'{"text": "a' + b"".join(pieces).replace(b"\n", b" ") + b'"}\n'
    try:
        block.decode("utf-8")
        python = True
    except UnicodeDecodeError:
        python = False
    assert nanodata.pipeline.jsonl._plain_lines(block, nanodata.pipeline.jsonl.line_bounds(block)[0]) is python
