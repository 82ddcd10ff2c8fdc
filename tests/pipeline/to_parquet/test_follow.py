"""--follow: tail a JSONL another process is still writing, half lines and pauses included."""

import json
import threading
import time

import pytest
from jsonl_corpus import make_records, read_rows

from nanodata.errors import NanodataError
from nanodata.pipeline.jsonl import line_bounds, read_blocks
from nanodata.pipeline.to_parquet import jsonl_to_parquet


def slow_writer(path, records, done_marker=True, rename_in=False):
    """Writes every doc in two pieces, flushing (and pausing) in the middle of some lines."""
    target = path.with_name(path.name + ".writing") if rename_in else path
    with open(target, "wb") as f:
        for i, record in enumerate(records):
            line = (json.dumps(record) + "\n").encode()
            cut = len(line) // 2
            f.write(line[:cut])
            f.flush()
            if i % 40 == 0:
                time.sleep(0.05)  # the reader sees a half line here
            f.write(line[cut:])
            f.flush()
    if rename_in:
        target.rename(path)
    if done_marker:
        path.with_name(path.name + ".done").write_bytes(b"")


def run_follow(tmp_path, records, idle_timeout, **writer_kw):
    path = tmp_path / "live.jsonl"
    writer = threading.Thread(target=slow_writer, args=(path, records), kwargs=writer_kw)
    writer.start()
    started = time.monotonic()
    manifest = jsonl_to_parquet([path], tmp_path / "out", rows_per_file=150, val_fraction=0.1, follow=True,
                                idle_timeout=idle_timeout)
    elapsed = time.monotonic() - started
    writer.join()
    return manifest, elapsed


def test_follow_reads_half_written_lines_only_when_complete(tmp_path):
    records = make_records(600, seed=5)
    manifest, elapsed = run_follow(tmp_path, records, idle_timeout=30)
    assert elapsed < 20  # ended by the .done marker, not by the 30 s idle timeout
    assert manifest["bad_lines"] == {}  # no half line was ever parsed
    rows = [r for rs in read_rows(tmp_path / "out", manifest).values() for r in rs]
    assert sorted(json.dumps(r, sort_keys=True) for r in rows) == sorted(json.dumps(r, sort_keys=True)
                                                                        for r in records)


def test_follow_ends_after_idle_timeout_without_marker(tmp_path):
    records = make_records(200, seed=6)
    manifest, elapsed = run_follow(tmp_path, records, idle_timeout=0.6, done_marker=False)
    assert manifest["total_rows"] == 200 and manifest["bad_lines"] == {}
    assert elapsed >= 0.6


def test_follow_waits_for_a_file_that_is_renamed_into_place(tmp_path):
    records = make_records(120, seed=7)
    manifest, _ = run_follow(tmp_path, records, idle_timeout=10, rename_in=True)
    assert manifest["total_rows"] == 120


def test_reader_holds_back_a_partial_line_until_its_newline(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"text": "one"}\n{"text": "tw')
    seen = []

    def consume():
        for offset, block in read_blocks(path, follow=True, idle_timeout=5):
            seen.append((offset, block, time.monotonic()))

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.4)
    assert [s[:2] for s in seen] == [(0, b'{"text": "one"}\n')]
    completed_at = time.monotonic()
    with open(path, "ab") as f:
        f.write(b'o"}\n')
    path.with_name("p.jsonl.done").write_bytes(b"")
    t.join(timeout=5)
    assert [s[:2] for s in seen] == [(0, b'{"text": "one"}\n'), (16, b'{"text": "two"}\n')]
    assert seen[1][2] >= completed_at


def test_reader_resumes_from_an_offset_and_splits_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"a\nbb\nccc\ndd")
    blocks = list(read_blocks(path, offset=2, block_size=4))
    assert b"".join(b for _, b in blocks) == b"bb\nccc\ndd"
    assert all(bytes(b).endswith(b"\n") for _, b in blocks[:-1]) and blocks[-1] == (9, b"dd")
    starts, ends = line_bounds(b"bb\nccc\ndd")
    assert starts.tolist() == [0, 3, 7] and ends.tolist() == [3, 7, 9]


def test_a_followed_input_that_ends_without_a_good_doc_fails(tmp_path):
    """Ended by its .done marker (or the idle timeout) with only bad lines: no _COMPLETE, a one-line error."""
    path = tmp_path / "live.jsonl"

    def writer():
        time.sleep(0.3)
        path.write_bytes(b'{"text": ""}\n{torn')
        time.sleep(0.3)
        path.with_name("live.jsonl.done").write_bytes(b"")

    thread = threading.Thread(target=writer)
    thread.start()
    with pytest.raises(NanodataError, match=r"no good doc, 2 bad line\(s\) \(1 empty_text, 1 invalid_json\)"):
        jsonl_to_parquet([path], tmp_path / "out", follow=True, idle_timeout=30)
    thread.join()
    assert not (tmp_path / "out" / "_COMPLETE").exists() and not (tmp_path / "out" / "manifest.json").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    with pytest.raises(NanodataError, match="no good doc, 0 bad line"):  # never grows: the idle timeout ends it
        jsonl_to_parquet([empty], tmp_path / "out2", follow=True, idle_timeout=0.3)
    assert not (tmp_path / "out2" / "_COMPLETE").exists()
