"""RowSpool (rows parsed once, spooled as their strings in sorted runs) writes the bytes SortedSpool writes from
the same docs as raw JSON lines, parsed when written: the shard writer of to-parquet before issue 31 and of the
DAG now. Both close row groups and files where a plain walk over the rows would (row_groups)."""

import json
import os
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nanodata.pipeline.jsonl import parse_block
from nanodata.pipeline.shuffle import RowSpool, SortedSpool, row_groups

text = st.text(min_size=1, max_size=200).filter(str.strip)
doc = st.fixed_dictionaries({"text": text}, optional={
    "n_tokens": st.integers(0, 2 ** 63 - 1) | st.none(), "mode": st.text(max_size=8) | st.none(),
    "source": st.text(max_size=40) | st.none(), "kind": st.text(max_size=8) | st.none(), "extra": st.booleans()})
key = st.integers(0, 3) | st.integers(0, 2 ** 64 - 1)  # small keys tie: ties keep the order docs were added in
shape = st.fixed_dictionaries({"rows_per_file": st.integers(1, 40), "file_bytes": st.integers(1, 5000),
                               "row_group_rows": st.integers(1, 20), "row_group_bytes": st.integers(1, 3000),
                               "compression": st.sampled_from(["zstd", "snappy", "none"])})


def write(spool, out: Path, shape: dict) -> tuple[list[dict], dict[str, bytes]]:
    out.mkdir()
    try:
        files = spool.write(lambda k: out / f"shard_{k:05d}.parquet", **shape)
    finally:
        spool.close()
    return files, {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(doc, key, st.booleans()), min_size=1, max_size=60), st.integers(1, 4), shape)
def test_row_spool_writes_the_bytes_of_parsing_the_lines_when_written(docs, blocks, shape):
    lines = [json.dumps(d, ensure_ascii=ascii_only).encode() + b"\n" for d, _, ascii_only in docs]
    keys = np.array([k for _, k, _ in docs], dtype=np.uint64)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        raw, rows = SortedSpool(tmp / "raw.spool"), RowSpool(tmp / "rows.spool")
        for line, k in zip(lines, keys.tolist(), strict=True):
            raw.add(k, line)
        for part in np.array_split(np.arange(len(lines)), blocks):  # rows arrive a block at a time
            if len(part):
                parsed = parse_block(b"".join(lines[part[0]:part[-1] + 1]))
                assert not parsed.bad
                rows.add_rows(keys[part], parsed.ends - parsed.starts, parsed.table, np.arange(len(part)))
        assert (len(rows), rows.bytes) == (len(raw), raw.bytes)
        assert write(rows, tmp / "rows", shape) == write(raw, tmp / "raw", shape)


def test_rows_added_out_of_order_and_some_left_out(tmp_path):
    """add_rows takes any subset of a block's rows, in any order (to-parquet leaves out val docs)."""
    docs = [{"text": f"doc {i} é", "n_tokens": i if i % 3 else None, "mode": None if i % 4 else "basic",
             "source": f"f{i}.cpp"} for i in range(30)]
    lines = [json.dumps(d).encode() + b"\n" for d in docs]
    parsed = parse_block(b"".join(lines))
    chosen = np.array([29, 3, 4, 17, 0, 8, 9, 10])
    raw, rows = SortedSpool(tmp_path / "raw.spool"), RowSpool(tmp_path / "rows.spool")
    for j in chosen.tolist():
        raw.add(j, lines[j])
    rows.add_rows(chosen.astype(np.uint64), (parsed.ends - parsed.starts)[chosen], parsed.table, chosen)
    shape = {"rows_per_file": 5, "row_group_rows": 2, "row_group_bytes": 4 << 20, "compression": "zstd"}
    files, data = write(rows, tmp_path / "rows", shape)
    assert (files, data) == write(raw, tmp_path / "raw", shape)
    assert [f["rows"] for f in files] == [5, 3]


def test_a_row_group_is_read_in_a_few_stretches_not_a_record_per_row(tmp_path, monkeypatch):
    """Each add_rows call is one run sorted by key, so a row group (a range of keys) lies in one stretch of each
    run: two reads per run (texts, metadata), whatever the rows per group."""
    lines = [json.dumps({"text": f"doc {i}", "n_tokens": i, "source": f"f{i}.cpp"}).encode() + b"\n"
             for i in range(300)]
    keys = np.random.default_rng(0).integers(0, 2 ** 63, size=300).astype(np.uint64)
    rows = RowSpool(tmp_path / "rows.spool")
    for part in np.array_split(np.arange(300), 3):   # three runs
        parsed = parse_block(b"".join(lines[part[0]:part[-1] + 1]))
        rows.add_rows(keys[part], parsed.ends - parsed.starts, parsed.table, np.arange(len(part)))
    reads = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, buffers, at: reads.append(at) or preadv(fd, buffers, at))
    files, _ = write(rows, tmp_path / "out", {"rows_per_file": 300, "row_group_rows": 50, "compression": "zstd"})
    assert [f["rows"] for f in files] == [300]
    assert len(reads) <= 6 * 2 * 3   # 6 row groups, 2 reads per run, 3 runs (a read per row: 300)


def _walk(weights: list[int], rows_per_file: int, file_bytes: int, row_group_rows: int,
          row_group_bytes: int) -> list[list[tuple[int, int]]]:
    """The plain rule, a step per row: a group takes rows while it is under both its limits and its file under
    both of its own."""
    files, i, n = [], 0, len(weights)
    while i < n:
        groups, rows, size = [], 0, 0
        while i < n and rows < rows_per_file and size < file_bytes:
            start, group_bytes = i, 0
            while (i < n and i - start < row_group_rows and group_bytes < row_group_bytes
                   and rows + i - start < rows_per_file and size + group_bytes < file_bytes):
                group_bytes += weights[i]
                i += 1
            groups.append((start, i))
            rows, size = rows + i - start, size + group_bytes
        files.append(groups)
    return files


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 50), max_size=80), st.integers(1, 30), st.integers(1, 400), st.integers(1, 12),
       st.integers(1, 200))
@example([10, 10, 10, 10], 3, 25, 2, 15)   # every limit closes something
def test_row_groups_close_where_a_walk_over_the_rows_would(weights, rows_per_file, file_bytes, row_group_rows,
                                                           row_group_bytes):
    shape = {"rows_per_file": rows_per_file, "file_bytes": file_bytes, "row_group_rows": row_group_rows,
             "row_group_bytes": row_group_bytes}
    assert row_groups(np.array(weights, dtype=np.uint64), **shape) == _walk(weights, **shape)
