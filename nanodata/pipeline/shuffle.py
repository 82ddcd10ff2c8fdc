"""The one split and shuffle rule of `nanodata to-parquet` and the corpus DAG, and the shard writer both use.

Every rule is a seeded function of a doc's content digest (blake2b-128 of its UTF-8 text, the digest the
chunker's dedupe already keys on), never of where the doc was read or how the work was cut:
- `is_val`: the doc is in val when a seeded 64-bit hash of its digest is below val_fraction * 2**64;
- `shuffle_key`: rows of a parquet file are sorted by another seeded 64-bit hash (a shuffle that needs
  no RNG state, so a file's order is the same whoever assembles it);
- `shard_of` / `bucket_of`: where the DAG's mapped tail routes a doc.

`SortedSpool` holds a shard's docs as raw JSON lines in a local spool file and only (key, offset, length)
per doc in memory; `write` reads the lines back in key order and closes a row group at `row_group_rows`
or `row_group_bytes`, a file at `rows_per_file` or `file_bytes`. Memory is one row group, whatever the
doc sizes or the shard's row count.
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

from nanodata.pipeline.jsonl import SCHEMA, parse_block
from nanodata.storage.files import atomic_output, content_hash, disk_errors, file_digest

ROW_GROUP_ROWS = 1024
ROW_GROUP_BYTES = 4 << 20   # a few MB: byte-sized row groups bound memory and balance the loader's ranks
FILE_BYTES = 512 << 20      # of JSON lines per parquet file (about 4x less once compressed)


def text_digest(text: bytes) -> bytes:
    """The content digest: the chunker's dedupe key (nanodata.pipeline.chunking.writer)."""
    return content_hash(text)


def text_digests(texts: pa.ChunkedArray | pa.Array) -> list[bytes]:
    """text_digest of every string of an Arrow column, hashed from its buffers (no Python strings made)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int32)[texts.offset:texts.offset + len(texts) + 1].tolist()
    data = memoryview(texts.buffers()[2] or b"")
    return [text_digest(data[a:b]) for a, b in zip(offsets, offsets[1:], strict=False)]


def _seeded(digest: bytes, seed: int, what: str) -> int:
    # a keyed hash per purpose: split, order and routing are independent of each other
    return int.from_bytes(hashlib.blake2b(digest, digest_size=8, key=f"nanodata-{what}-{seed}".encode()).digest(),
                          "big")


def is_val(digest: bytes, seed: int, val_fraction: float) -> bool:
    return _seeded(digest, seed, "val") < int(val_fraction * 2 ** 64)


def shuffle_key(digest: bytes, seed: int) -> int:
    return _seeded(digest, seed, "order")


def shard_of(digest: bytes, seed: int, shards: int) -> int:
    return _seeded(digest, seed, "shard") % shards


def bucket_of(digest: bytes, buckets: int) -> int:
    """Dedupe bucket: equal texts meet in one bucket (unseeded: the bucket count never changes the output)."""
    return int.from_bytes(digest[:8], "big") % buckets


def file_digests(path: Path) -> dict:
    return {"bytes": path.stat().st_size, "sha256": file_digest(path, "sha256"), "crc32c": file_digest(path, "crc32c")}


class SortedSpool:
    """Raw JSON lines spooled to a local file with a sort key each; written out in key order (ties: added order)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with disk_errors(self.path):
            self.file = open(self.path, "w+b")
        self.keys, self.starts, self.lengths = array("Q"), array("Q"), array("Q")
        self.bytes = 0

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: int, line: bytes) -> None:
        """line: one JSON doc ending in a newline."""
        self.keys.append(key)
        self.starts.append(self.bytes)
        self.lengths.append(len(line))
        try:  # no context manager per doc: it cost a tenth of to-parquet's time
            self.file.write(line)
        except OSError:
            with disk_errors(self.path):
                raise
        self.bytes += len(line)

    def close(self) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)

    def write(self, name_of, *, rows_per_file: int, file_bytes: int = FILE_BYTES,
              row_group_rows: int = ROW_GROUP_ROWS, row_group_bytes: int = ROW_GROUP_BYTES,
              compression: str = "zstd") -> list[dict]:
        """Write the spooled docs sorted by key into name_of(0), name_of(1), ... (local paths, each written
        whole: temp + rename); returns [{"name", "rows", "bytes", "sha256", "crc32c", "tokens"}] per file."""
        self.file.flush()
        order = np.argsort(np.frombuffer(self.keys, dtype=np.uint64), kind="stable")
        starts, lengths = np.frombuffer(self.starts, dtype=np.uint64), np.frombuffer(self.lengths, dtype=np.uint64)
        files: list[dict] = []
        fd = self.file.fileno()
        i, n = 0, len(order)
        while i < n:
            path = Path(name_of(len(files)))
            rows = tokens = size = 0
            with atomic_output(path) as f, pq.ParquetWriter(f, SCHEMA, compression=compression) as writer:
                while i < n and rows < rows_per_file and size < file_bytes:
                    group, group_bytes = [], 0
                    while (i < n and len(group) < row_group_rows and group_bytes < row_group_bytes
                           and rows + len(group) < rows_per_file and size + group_bytes < file_bytes):
                        j = order[i]
                        group.append(os.pread(fd, int(lengths[j]), int(starts[j])))
                        group_bytes += int(lengths[j])
                        i += 1
                    table = parse_block(b"".join(group)).table
                    writer.write_table(table, row_group_size=len(group))
                    n_tokens = table.column("n_tokens")
                    tokens = None if tokens is None or n_tokens.null_count else tokens + (pc.sum(n_tokens).as_py() or 0)
                    rows += len(group)
                    size += group_bytes
            files.append({"name": path.name, "rows": rows, **file_digests(path), "tokens": tokens})
        return files
