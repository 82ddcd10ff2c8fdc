"""Bad input lines: skipped and counted by kind with their line numbers, or fatal with --on-error fail."""

import json

import pytest
from jsonl_corpus import make_records, read_rows, write_jsonl

from nanodata.cli import main as cli_main
from nanodata.errors import NanodataError
from nanodata.pipeline.to_parquet import jsonl_to_parquet

BAD = {  # line → the kind it must be counted as
    "{not json": "invalid_json",
    "": "invalid_json",
    '{"text": "cut off': "invalid_json",
    '["a", "list"]': "not_an_object",
    '{"content": "no text field"}': "missing_text",
    '{"text": null}': "non_string_text",
    '{"text": 42}': "non_string_text",
    '{"text": ""}': "empty_text",
    '{"text": "   \\n\\t"}': "empty_text",
    '{"text": "ok", "n_tokens": "12"}': "bad_metadata",
    '{"text": "ok", "source": 7}': "bad_metadata",
    '{"text": "lone \\ud800 surrogate"}': "invalid_unicode",
}


def test_each_kind_of_bad_line_is_skipped_and_counted(tmp_path):
    good = make_records(60, seed=3)
    lines = list(BAD)
    path = tmp_path / "mixed.jsonl"
    with open(path, "wb") as f:  # good docs interleaved with bad lines: bad line i sits at line 2i+2
        for i, record in enumerate(good):
            f.write(__import__("json").dumps(record).encode() + b"\n")
            if i < len(lines):
                f.write(lines[i].encode() + b"\n")
        f.write(b'\xff\xfe{"text": "bad utf-8"}\n')
    manifest = jsonl_to_parquet([path], tmp_path / "out", rows_per_file=25, val_fraction=0.2)
    expected = {}
    for i, line in enumerate(lines):
        expected.setdefault(BAD[line], []).append(f"{path}:{2 * i + 2}")
    expected["not_utf8"] = [f"{path}:{len(good) + len(lines) + 1}"]
    assert {k: v["count"] for k, v in manifest["bad_lines"].items()} == {k: len(v) for k, v in expected.items()}
    for kind, where in expected.items():
        assert manifest["bad_lines"][kind]["first_lines"] == where[:5]
    texts = sorted(r["text"] for rs in read_rows(tmp_path / "out", manifest).values() for r in rs)
    assert texts == sorted(r["text"] for r in good)


def test_first_line_numbers_are_capped(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", make_records(5), extra_lines=["oops"] * 9)
    manifest = jsonl_to_parquet([path], tmp_path / "out")
    assert manifest["bad_lines"]["invalid_json"] == {"count": 9, "first_lines": [f"{path}:{n}" for n in range(6, 11)]}


def test_unterminated_last_line_is_read_once_the_file_is_finished(tmp_path):
    path = tmp_path / "tail.jsonl"
    write_jsonl(path, make_records(10))
    with open(path, "a") as f:
        f.write('{"text": "last doc, no newline"}')
    manifest = jsonl_to_parquet([path], tmp_path / "out", val_fraction=0)
    texts = [r["text"] for rs in read_rows(tmp_path / "out", manifest).values() for r in rs]
    assert "last doc, no newline" in texts and len(texts) == 11 and manifest["bad_lines"] == {}


def test_on_error_fail_stops_at_the_first_bad_line(tmp_path, capsys):
    path = write_jsonl(tmp_path / "x.jsonl", make_records(30), extra_lines=['{"text": 3}', "junk"])
    with pytest.raises(NanodataError, match=r"x\.jsonl:31: non string text"):
        jsonl_to_parquet([path], tmp_path / "out", on_error="fail")
    assert not (tmp_path / "out" / "_COMPLETE").exists()
    assert cli_main(["to-parquet", "--input", str(path), "--out", str(tmp_path / "cli"), "--on-error", "fail"]) == 2
    err = capsys.readouterr().err
    assert "x.jsonl:31" in err and "--on-error fail" in err


def test_output_does_not_depend_on_block_cuts_or_parse_path(tmp_path, monkeypatch):
    """Clean blocks take Arrow's reader, blocks with a bad line go line by line: same rows either way."""
    from jsonl_corpus import file_bytes

    import nanodata.pipeline.jsonl

    records = make_records(900, seed=9)
    clean = write_jsonl(tmp_path / "clean.jsonl", records)
    dirty = write_jsonl(tmp_path / "dirty.jsonl", records, extra_lines=["{broken"])
    kw = {"rows_per_file": 200, "row_group_size": 50, "val_fraction": 0.1}
    a = jsonl_to_parquet([clean], tmp_path / "a", **kw)
    b = jsonl_to_parquet([dirty], tmp_path / "b", **kw)  # one block, parsed line by line
    monkeypatch.setattr(nanodata.pipeline.jsonl, "BLOCK", 997)  # many small blocks, cut anywhere
    c = jsonl_to_parquet([clean], tmp_path / "c", **kw)
    assert b["bad_lines"]["invalid_json"]["count"] == 1
    assert a["shards"] == b["shards"] == c["shards"] and a["val"] == b["val"] == c["val"]
    bytes_a = file_bytes(tmp_path / "a")
    assert {k: v for k, v in file_bytes(tmp_path / "b").items() if k != "manifest.json"} == \
        {k: v for k, v in bytes_a.items() if k != "manifest.json"}
    assert file_bytes(tmp_path / "c") == bytes_a


def test_a_line_that_is_not_utf8_is_a_bad_line_never_a_row(tmp_path, capsys):
    """Well-formed JSON in Latin-1 among clean lines: Arrow's reader took it as a (broken) string."""
    path = write_jsonl(tmp_path / "latin1.jsonl", make_records(3))
    with open(path, "ab") as f:
        f.write('{"text": "caf\u00e9"}\n'.encode("latin-1"))
    out = tmp_path / "out"
    assert cli_main(["to-parquet", "--input", str(path), "--out", str(out), "--val-fraction", "0"]) == 0
    assert "3 rows, 1 bad line(s)" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["bad_lines"] == {"not_utf8": {"count": 1, "first_lines": [f"{path}:4"]}}
    texts = [r["text"] for rs in read_rows(out, manifest).values() for r in rs]  # decodes every string
    assert sorted(texts) == sorted(r["text"] for r in make_records(3))


def test_bad_line_accounting_does_not_depend_on_block_size(tmp_path, monkeypatch):
    """Each kind of tricky line among clean ones: where the blocks are cut (a resumed run cuts them at its
    checkpoint) must not change a single byte of the output, manifest included."""
    from jsonl_corpus import file_bytes

    import nanodata.pipeline.jsonl

    records = make_records(400, seed=4)
    tricky = [b"{broken", '{"text": "caf\u00e9"}'.encode("latin-1"), b"", b'{"text": "a"} {"text": "b"}',
              b"   ", b'\xef\xbb\xbf{"text": "after a BOM"}', b'{"text": "x", "big": 1' + b"0" * 5000 + b"}",
              b'{"text": "deep", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}", b'{"text": "crlf"}\r']
    after = {5 + 37 * k: line for k, line in enumerate(tricky)}  # each once, among clean lines
    path = tmp_path / "mixed.jsonl"
    with open(path, "wb") as f:
        for i, record in enumerate(records):
            f.write(json.dumps(record).encode() + b"\n" + (after[i] + b"\n" if i in after else b""))
    kw = {"rows_per_file": 90, "row_group_size": 16, "val_fraction": 0.1}
    reference = jsonl_to_parquet([path], tmp_path / "ref", **kw)
    assert {k: v["count"] for k, v in reference["bad_lines"].items()} == \
        {"invalid_json": 4, "not_utf8": 1}  # {broken, the empty line, two objects, the blank line
    texts = {r["text"] for rs in read_rows(tmp_path / "ref", reference).values() for r in rs}
    assert {"after a BOM", "x", "deep", "crlf"} <= texts and "a" not in texts
    for block in (61, 500, 4099, 65536):
        monkeypatch.setattr(nanodata.pipeline.jsonl, "BLOCK", block)
        jsonl_to_parquet([path], tmp_path / str(block), **kw)
        assert file_bytes(tmp_path / str(block)) == file_bytes(tmp_path / "ref"), block
