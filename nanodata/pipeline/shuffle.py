"""The one split and shuffle rule of `nanodata to-parquet` and the corpus DAG, and the shard writer both use.

Every rule is a seeded function of a doc's content digest (blake2b-128 of its UTF-8 text, the digest the
chunker's dedupe already keys on), never of where the doc was read or how the work was cut:
- `is_val`: the doc is in val when a seeded 64-bit hash of its digest is below val_fraction * 2**64;
- `shuffle_key`: rows of a parquet file are sorted by another seeded 64-bit hash (a shuffle that needs
  no RNG state, so a file's order is the same whoever assembles it);
- `shard_of` / `bucket_of`: where the DAG's mapped tail routes a doc.

A spool holds a shard's docs in a local file and only a key and a few lengths per doc in memory; `write`
reads them back in key order and closes a row group at `row_group_rows` or `row_group_bytes`, a file at
`rows_per_file` or `file_bytes` (bytes of the docs' JSON lines). Memory is one row group, whatever the doc
sizes or the shard's row count. `SortedSpool` takes raw JSON lines and parses them when it writes (the
DAG's shards); `RowSpool` takes rows already parsed and writes them without parsing again (to-parquet).
"""

from __future__ import annotations

import hashlib
import os
from array import array
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
    """The content digest: the chunker's dedupe key (nanodata.pipeline.chunking.writer)."""
    return content_hash(text)


def text_digests_of(texts) -> list[bytes]:
    # storage.files.content_hash's rule in one comprehension, no call per doc: to-parquet hashes every doc three times
    blake2b = hashlib.blake2b
    return [blake2b(text, digest_size=16).digest() for text in texts]


def _one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The column as one array; combine_chunks would copy even a single chunk."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def text_digests(texts: pa.ChunkedArray | pa.Array) -> list[bytes]:
    """text_digest of every string of an Arrow column, hashed from its buffers (no Python strings made)."""
    texts = _one_array(texts)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int32)[texts.offset:texts.offset + len(texts) + 1].tolist()
    data = memoryview(texts.buffers()[2] or b"")
    return text_digests_of(data[a:b] for a, b in zip(offsets, offsets[1:], strict=False))


def _seeded_all(digests, seed: int, what: str) -> list[int]:
    # a keyed hash per purpose: split, order and routing are independent of each other
    key, blake2b, from_bytes = f"nanodata-{what}-{seed}".encode(), hashlib.blake2b, int.from_bytes
    return [from_bytes(blake2b(digest, digest_size=8, key=key).digest(), "big") for digest in digests]


def _seeded(digest: bytes, seed: int, what: str) -> int:
    return _seeded_all([digest], seed, what)[0]


def is_val(digest: bytes, seed: int, val_fraction: float) -> bool:
    return _seeded(digest, seed, "val") < int(val_fraction * 2 ** 64)


def val_mask(digests: list[bytes], seed: int, val_fraction: float) -> np.ndarray:
    """is_val of every digest (the key made once, not per doc)."""
    return np.array(_seeded_all(digests, seed, "val"), dtype=np.uint64) < np.uint64(int(val_fraction * 2 ** 64))


def shuffle_key(digest: bytes, seed: int) -> int:
    return _seeded(digest, seed, "order")


def shuffle_keys(digests: list[bytes], seed: int) -> np.ndarray:
    return np.array(_seeded_all(digests, seed, "order"), dtype=np.uint64)


def shard_of(digest: bytes, seed: int, shards: int) -> int:
    return _seeded(digest, seed, "shard") % shards


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
        self.starts = array("Q")  # where each row's record starts in the spool file
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
        order = np.argsort(np.frombuffer(self.keys, dtype=np.uint64), kind="stable").tolist()
        weights = self.weights
        files: list[dict] = []
        i, n = 0, len(order)
        while i < n:
            path = Path(name_of(len(files)))
            rows = tokens = size = 0
            with atomic_output(path) as f, pq.ParquetWriter(f, SCHEMA, compression=compression) as writer:
                while i < n and rows < rows_per_file and size < file_bytes:
                    group, group_bytes = [], 0
                    while (i < n and len(group) < row_group_rows and group_bytes < row_group_bytes
                           and rows + len(group) < rows_per_file and size + group_bytes < file_bytes):
                        group.append(order[i])
                        group_bytes += weights[order[i]]
                        i += 1
                    table = self._table(group)
                    writer.write_table(table, row_group_size=len(group))
                    n_tokens = table.column("n_tokens")
                    tokens = None if tokens is None or n_tokens.null_count else tokens + (pc.sum(n_tokens).as_py() or 0)
                    rows += len(group)
                    size += group_bytes
            files.append({"name": path.name, "rows": rows, **file_digests(path), "tokens": tokens})
        return files


class SortedSpool(_Spool):
    """Raw JSON lines, parsed when written (the DAG's shards are handed raw docs)."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.lengths = array("Q")

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


def _strings(sizes: np.ndarray, data: bytearray, valid: np.ndarray | None = None) -> pa.Array:
    """A string array over `data` (no copy): value i is the next sizes[i] bytes; null where not valid."""
    offsets = np.concatenate(([0], np.cumsum(sizes)))
    if offsets[-1] >= 2 ** 31:
        raise NanodataError(f"a row group of {offsets[-1]} bytes of strings: over the 2 GiB a parquet column chunk "
                            "is written from; lower row_group_bytes")
    nulls = None if valid is None else _validity(valid)
    return pa.StringArray.from_buffers(len(sizes), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), nulls)


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


class RowSpool(_Spool):
    """Rows already parsed, spooled as UTF-8 bytes, so that writing them parses nothing.

    A row's record is its text, then its mode, source and kind back to back. Memory holds where it
    starts, the text's length, each metadata field's length (-1 - length where it is null) and n_tokens
    (-1 where it is null), beside the key and the weight. One read per row fills the text column's
    buffer and the metadata's."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.texts, self.fields, self.n_tokens = array("Q"), array("q"), array("q")

    def add_rows(self, keys: np.ndarray, weights: np.ndarray, table: pa.Table, rows: np.ndarray) -> None:
        """table's rows `rows` (SCHEMA), with their sort keys and weights (the bytes of their JSON lines)."""
        if not len(rows):
            return
        text = _one_array(table.column("text"))
        text_at, text_data = _offsets(text), memoryview(text.buffers()[2] or b"")
        text_sizes = np.diff(text_at)[rows]
        # one gather puts each row's metadata strings side by side, rows in the order given
        take = (np.arange(len(META_FIELDS)) * table.num_rows + rows[:, None]).ravel()
        meta = pa.concat_arrays([_one_array(table.column(name)) for name in META_FIELDS]).take(pa.array(take))
        meta_at, meta_data = _offsets(meta), memoryview(meta.buffers()[2] or b"")
        parts = []
        for a, b, c, d in zip(text_at[rows].tolist(), text_at[rows + 1].tolist(), meta_at[:-1:3].tolist(),
                              meta_at[3::3].tolist(), strict=True):
            parts += (text_data[a:b], meta_data[c:d])
        sizes = np.diff(meta_at)
        lengths = text_sizes + sizes.reshape(-1, len(META_FIELDS)).sum(axis=1)
        _extend(self.starts, self.spooled + np.cumsum(lengths) - lengths)
        _extend(self.texts, text_sizes)
        _extend(self.fields, np.where(meta.is_null().to_numpy(zero_copy_only=False), -1 - sizes, sizes))
        _extend(self.n_tokens, pc.fill_null(table.column("n_tokens"), -1).to_numpy()[rows])
        _extend(self.keys, keys)
        _extend(self.weights, weights)
        self.bytes += int(weights.sum())
        self._spool(b"".join(parts))

    def _table(self, rows: list[int]) -> pa.Table:
        index = np.array(rows)
        texts = np.frombuffer(self.texts, dtype=np.uint64)[index]
        fields = np.frombuffer(self.fields, dtype=np.int64).reshape(-1, len(META_FIELDS))[index].ravel()
        valid = fields >= 0
        metas = np.where(valid, fields, -1 - fields)
        text_data, meta_data = bytearray(int(texts.sum())), bytearray(int(metas.sum()))
        text_view, meta_view = memoryview(text_data), memoryview(meta_data)
        text_at = np.cumsum(texts).tolist()
        meta_at = np.cumsum(metas.reshape(-1, len(META_FIELDS)).sum(axis=1)).tolist()
        fd, preadv, got, t, m = self.file.fileno(), os.preadv, 0, 0, 0
        for start, t_end, m_end in zip(np.frombuffer(self.starts, dtype=np.uint64)[index].tolist(), text_at, meta_at,
                                       strict=True):
            got += preadv(fd, [text_view[t:t_end], meta_view[m:m_end]], start)
            t, m = t_end, m_end
        if got != len(text_data) + len(meta_data):
            raise NanodataError(f"{self.path}: the spool is shorter than the rows it holds")
        meta = _strings(metas, meta_data, valid)
        columns = {name: meta.take(pa.array(np.arange(k, len(fields), len(META_FIELDS))))
                   for k, name in enumerate(META_FIELDS)}
        columns["text"] = _strings(texts, text_data)
        n_tokens = np.frombuffer(self.n_tokens, dtype=np.int64)[index]
        columns["n_tokens"] = pa.Array.from_buffers(pa.int64(), len(rows), [_validity(n_tokens >= 0), pa.py_buffer(n_tokens)])
        return pa.table([columns[field.name] for field in SCHEMA], schema=SCHEMA)
