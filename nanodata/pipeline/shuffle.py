"""The one split and shuffle rule of `nanodata to-parquet` and the corpus DAG, and the shard writer both use.

Every rule is a seeded function of a doc's content digest (blake2b-128 of its UTF-8 text, the digest the
chunker's dedupe already keys on), never of where the doc was read or how the work was cut:
- `val_mask`: a doc is in val when a seeded 64-bit hash of its digest is below val_fraction * 2**64;
- `shuffle_key`: rows of a parquet file are sorted by another seeded 64-bit hash (a shuffle that needs
  no RNG state, so a file's order is the same whoever assembles it);
- `shards_of` / `bucket_of`: where the DAG's mapped tail routes a doc.

A spool holds a shard's docs in a local file and only a key and a few lengths per doc in memory; `write`
reads them back in key order and closes a row group at `row_group_rows` or `row_group_bytes`, a file at
`rows_per_file` or `file_bytes` (bytes of the docs' JSON lines). Memory is one row group, whatever the doc
sizes or the shard's row count. `SortedSpool` takes raw JSON lines and parses them when it writes (the
DAG's shards); `RowSpool` takes rows already parsed, spooled in sorted runs, and writes them without parsing
again (to-parquet).
"""

from __future__ import annotations

import hashlib
import os
from array import array
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nanodata.errors import NanodataError
from nanodata.pipeline.jsonl import SCHEMA, parse_block
from nanodata.storage.files import atomic_output, content_hash, disk_errors, file_digest

ROW_GROUP_ROWS = 1024
ROW_GROUP_BYTES = 4 << 20   # a few MB: byte-sized row groups bound memory and balance the loader's ranks
FILE_BYTES = 512 << 20      # of JSON lines per parquet file (about 4x less once compressed)


def text_digest(text: bytes) -> bytes:
    """The content digest: the chunker's dedupe key (nanodata.pipeline.chunkbuild.writer)."""
    return content_hash(text)


def _one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The column as one array; combine_chunks would copy even a single chunk."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def text_digests(texts: pa.ChunkedArray | pa.Array) -> list[bytes]:
    """text_digest of every string of an Arrow column, hashed from its buffers (no Python strings made):
    storage.files.content_hash's rule in one comprehension, no call per doc (to-parquet hashes every doc)."""
    texts = _one_array(texts)
    offsets = _offsets(texts).tolist()
    data, blake2b = memoryview(texts.buffers()[2] or b""), hashlib.blake2b
    return [blake2b(data[a:b], digest_size=16).digest() for a, b in zip(offsets, offsets[1:], strict=False)]


@lru_cache(maxsize=64)
def _keyed(seed: int, what: str):
    """The keyed hash of a purpose (split, order and routing are independent of each other), copied per digest:
    the key block is hashed once, not per doc."""
    return hashlib.blake2b(digest_size=8, key=f"nanodata-{what}-{seed}".encode())


def _seeded_all(digests, seed: int, what: str) -> np.ndarray:
    """_seeded of every digest, as an array."""
    copy, hashes = _keyed(seed, what).copy, []
    for digest in digests:
        keyed = copy()
        keyed.update(digest)
        hashes.append(keyed.digest())
    return np.frombuffer(b"".join(hashes), dtype=">u8").astype(np.uint64)


def _seeded(digest: bytes, seed: int, what: str) -> int:
    """A seeded 64-bit hash of a digest for one purpose: its keyed blake2b-64, big-endian."""
    keyed = _keyed(seed, what).copy()
    keyed.update(digest)
    return int.from_bytes(keyed.digest(), "big")


def val_mask(digests: list[bytes], seed: int, val_fraction: float) -> np.ndarray:
    """Whether each doc is in val (the key made once, not per doc)."""
    return _seeded_all(digests, seed, "val") < np.uint64(int(val_fraction * 2 ** 64))


def shuffle_key(digest: bytes, seed: int) -> int:
    return _seeded(digest, seed, "order")


def shuffle_keys(digests: list[bytes], seed: int) -> np.ndarray:
    return _seeded_all(digests, seed, "order")


def shards_of(digests: list[bytes], seed: int, shards: int) -> np.ndarray:
    """The shard (of `shards`) each doc is routed to (the key made once, not per doc)."""
    return _seeded_all(digests, seed, "shard") % np.uint64(shards)


def bucket_of(digest: bytes, buckets: int) -> int:
    """Dedupe bucket: equal texts meet in one bucket (unseeded: the bucket count never changes the output)."""
    return int.from_bytes(digest[:8], "big") % buckets


def file_digests(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": file_digest(path, "sha256"), "crc32c": file_digest(path, "crc32c")}


class _Spool:
    """Rows spooled to a local file with a sort key each; written out in key order (ties: added order).

    Each row has a weight, the bytes of its JSON line, that closes row groups and files; a subclass's
    `_table` turns spooled rows back into Arrow."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with disk_errors(self.path):
            self.file = open(self.path, "w+b")
        self.keys, self.weights = array("Q"), array("Q")
        self.bytes = 0  # sum of the weights
        self.spooled = 0  # bytes in the spool file

    def __len__(self) -> int:
        return len(self.keys)

    def _spool(self, data) -> None:
        try:  # no context manager per doc: it cost a tenth of to-parquet's time
            self.file.write(data)
        except OSError:
            with disk_errors(self.path):
                raise
        self.spooled += len(data)

    def close(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)

    def _table(self, rows: list[int]) -> pa.Table:
        raise NotImplementedError

    def write(self, name_of, *, rows_per_file: int, file_bytes: int = FILE_BYTES,
              row_group_rows: int = ROW_GROUP_ROWS, row_group_bytes: int = ROW_GROUP_BYTES,
              compression: str = "zstd") -> list[dict]:
        """Write the spooled docs sorted by key into name_of(0), name_of(1), ... (local paths, each written
        whole: temp + rename); returns [{"name", "rows", "bytes", "sha256", "crc32c", "tokens"}] per file."""
        self.file.flush()
        order = np.argsort(np.frombuffer(self.keys, dtype=np.uint64), kind="stable")
        weights = np.frombuffer(self.weights, dtype=np.uint64)[order]
        files: list[dict] = []
        for groups in row_groups(weights, rows_per_file=rows_per_file, file_bytes=file_bytes,
                                 row_group_rows=row_group_rows, row_group_bytes=row_group_bytes):
            path = Path(name_of(len(files)))
            tokens = 0
            with atomic_output(path) as f, pq.ParquetWriter(f, SCHEMA, compression=compression) as writer:
                for start, stop in groups:
                    table = self._table(order[start:stop])
                    writer.write_table(table, row_group_size=stop - start)
                    n_tokens = table.column("n_tokens")
                    tokens = None if tokens is None or n_tokens.null_count else tokens + (pc.sum(n_tokens).as_py() or 0)
            files.append({"name": path.name, "rows": groups[-1][1] - groups[0][0], **file_digests(path), "tokens": tokens})
        return files


def row_groups(weights: np.ndarray, *, rows_per_file: int, file_bytes: int, row_group_rows: int,
               row_group_bytes: int) -> list[list[tuple[int, int]]]:
    """How rows of these weights, in this order, fill files of row groups: per file, its groups' (start, stop).
    A group closes at row_group_rows rows, or with the row that brings its weight to row_group_bytes, or where
    its file closes: at rows_per_file rows, or with the row that brings the file's weight to file_bytes. Found
    by a search on the running weight per group, not a step per row (a shard holds hundreds of thousands)."""
    ends = np.cumsum(weights, dtype=np.uint64)   # the weight up to and including each row
    files, start, n = [], 0, len(weights)
    while start < n:
        groups, rows, size = [], 0, 0
        while start < n and rows < rows_per_file and size < file_bytes:
            before = int(ends[start - 1]) if start else 0
            heavy = int(np.searchsorted(ends, before + min(row_group_bytes, file_bytes - size), side="left")) + 1
            stop = min(n, start + row_group_rows, start + rows_per_file - rows, heavy)
            groups.append((start, stop))
            rows, size, start = rows + stop - start, size + int(ends[stop - 1]) - before, stop
        files.append(groups)
    return files


class SortedSpool(_Spool):
    """Raw JSON lines, parsed when written (the DAG's shards are handed raw docs)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.starts, self.lengths = array("Q"), array("Q")   # where each line is in the spool file

    def add(self, key: int, line: bytes) -> None:
        """line: one JSON doc ending in a newline."""
        self.keys.append(key)
        self.weights.append(len(line))
        self.starts.append(self.spooled)
        self.lengths.append(len(line))
        self.bytes += len(line)
        self._spool(line)

    def _table(self, rows: list[int]) -> pa.Table:
        fd, starts, lengths = self.file.fileno(), self.starts, self.lengths
        return parse_block(b"".join([os.pread(fd, lengths[j], starts[j]) for j in rows])).table


META_FIELDS = ("mode", "source", "kind")


def _extend(values: array, numbers: np.ndarray) -> None:
    values.frombytes(numbers.astype(values.typecode).tobytes())


def _offsets(array: pa.Array) -> np.ndarray:
    return np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]


def _data(array: pa.Array) -> memoryview:
    """The bytes of a string array's values, back to back."""
    at = _offsets(array)
    return memoryview(array.buffers()[2] or b"")[at[0]:at[-1]]


def _strings(sizes: np.ndarray, data: bytearray, valid: np.ndarray | None = None) -> pa.Array:
    """A string array over `data` (no copy): value i is the next sizes[i] bytes; null where not valid."""
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    if offsets[-1] >= 2 ** 31:
        raise NanodataError(f"a row group of {offsets[-1]} bytes of strings: over the 2 GiB a parquet column chunk "
                            "is written from; lower row_group_bytes")
    nulls = None if valid is None else _validity(valid)
    return pa.StringArray.from_buffers(len(sizes), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), nulls)


def _line_pairs(lines: pa.ChunkedArray) -> np.ndarray:
    """Each row's (first, last) line numbers, (-1, -1) where lines is null (a non-null value holds two: jsonl)."""
    pairs = np.full((len(lines), 2), -1, dtype=np.int64)
    held = pc.is_valid(lines).to_numpy(zero_copy_only=False)
    if held.any():
        pairs[held] = pc.list_flatten(lines).to_numpy(zero_copy_only=False).reshape(-1, 2)
    return pairs


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


class RowSpool(_Spool):
    """Rows already parsed, spooled as UTF-8 bytes, so that writing them parses nothing.

    Each add_rows call spools its rows as a run sorted by key (ties: the order given): their texts back to
    back, then their mode, source and kind strings back to back. A row group of the sorted shard is a range of
    keys, so its rows lie in one stretch of each run: writing it reads a few stretches (two per run), not a
    record per row, then puts the rows in key order with Arrow's take. Memory holds, per row, its key and
    weight, where its text and its metadata start in the file, the text's length, each metadata field's
    length (-1 - length where it is null), n_tokens (-1 where it is null) and its two line numbers (-1 where
    lines is null)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.text_at, self.meta_at = array("Q"), array("Q")
        self.texts, self.fields, self.n_tokens, self.lines = array("Q"), array("q"), array("q"), array("q")

    def add_rows(self, keys: np.ndarray, weights: np.ndarray, table: pa.Table, rows: np.ndarray) -> None:
        """table's rows `rows` (SCHEMA), with their sort keys and weights (the bytes of their JSON lines)."""
        if not len(rows):
            return
        by_key = np.argsort(keys, kind="stable")
        keys, weights, rows = keys[by_key], weights[by_key], np.asarray(rows)[by_key]
        text = _one_array(table.column("text")).take(pa.array(rows))
        # one gather puts each row's metadata strings side by side, rows in key order
        take = (np.arange(len(META_FIELDS)) * table.num_rows + rows[:, None]).ravel()
        meta = pa.concat_arrays([_one_array(table.column(name)) for name in META_FIELDS]).take(pa.array(take))
        text_sizes, sizes = np.diff(_offsets(text)), np.diff(_offsets(meta))
        meta_sizes = sizes.reshape(-1, len(META_FIELDS)).sum(axis=1)
        text_bytes = int(text_sizes.sum())
        _extend(self.text_at, self.spooled + np.cumsum(text_sizes) - text_sizes)
        _extend(self.meta_at, self.spooled + text_bytes + np.cumsum(meta_sizes) - meta_sizes)
        _extend(self.texts, text_sizes)
        _extend(self.fields, np.where(meta.is_null().to_numpy(zero_copy_only=False), -1 - sizes, sizes))
        _extend(self.n_tokens, pc.fill_null(table.column("n_tokens"), -1).to_numpy()[rows])
        _extend(self.lines, _line_pairs(table.column("lines"))[rows])
        _extend(self.keys, keys)
        _extend(self.weights, weights)
        self.bytes += int(weights.sum())
        self._spool(_data(text))
        self._spool(_data(meta))

    def _table(self, rows: np.ndarray) -> pa.Table:
        spooled = np.sort(rows)   # file order: a stretch of each run
        texts = np.frombuffer(self.texts, dtype=np.uint64)[spooled]
        fields = np.frombuffer(self.fields, dtype=np.int64).reshape(-1, len(META_FIELDS))[spooled].ravel()
        valid = fields >= 0
        metas = np.where(valid, fields, -1 - fields)
        text_data = self._read(np.frombuffer(self.text_at, dtype=np.uint64)[spooled], texts)
        meta_data = self._read(np.frombuffer(self.meta_at, dtype=np.uint64)[spooled],
                               metas.reshape(-1, len(META_FIELDS)).sum(axis=1))
        back = np.searchsorted(spooled, rows)   # file order -> key order
        meta = _strings(metas, meta_data, valid)
        columns = {name: meta.take(pa.array(back * len(META_FIELDS) + k)) for k, name in enumerate(META_FIELDS)}
        columns["text"] = _strings(texts, text_data).take(pa.array(back))
        n_tokens = np.frombuffer(self.n_tokens, dtype=np.int64)[rows]
        columns["n_tokens"] = pa.Array.from_buffers(pa.int64(), len(rows), [_validity(n_tokens >= 0), pa.py_buffer(n_tokens)])
        pairs = np.frombuffer(self.lines, dtype=np.int64).reshape(-1, 2)[rows]
        held = pairs[:, 0] >= 0
        offsets = np.concatenate(([0], np.cumsum(2 * held))).astype(np.int32)
        columns["lines"] = pa.ListArray.from_buffers(
            SCHEMA.field("lines").type, len(rows), [_validity(held), pa.py_buffer(offsets)],
            children=[pa.array(pairs[held].ravel(), type=pa.int64())])
        return pa.table([columns[field.name] for field in SCHEMA], schema=SCHEMA)

    def _read(self, at: np.ndarray, sizes: np.ndarray) -> bytearray:
        """Records (where, length), in file order, back to back: one read per stretch of adjacent records."""
        data = bytearray(int(sizes.sum()))
        ends = at + sizes
        breaks = (np.flatnonzero(at[1:] != ends[:-1]) + 1).tolist()   # where a record does not follow the last
        view, filled = memoryview(data), 0
        for first, last in zip([0, *breaks], [*breaks, len(at)], strict=True):
            size = int(ends[last - 1] - at[first])
            if os.preadv(self.file.fileno(), [view[filled:filled + size]], int(at[first])) != size:
                raise NanodataError(f"{self.path}: the spool is shorter than the rows it holds")
            filled += size
        return data
