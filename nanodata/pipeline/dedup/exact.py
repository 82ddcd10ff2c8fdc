"""Exact duplicates: a doc whose text equals an earlier doc's is dropped, the first in output order kept.

One rule with two faces, so the CLI and the DAG cannot disagree about which copy survives:
- `SeenTexts`: streaming, for a run that writes its docs in output order (`nanodata chunk`'s writer). The set
  of digests seen is a table on disk (SQLite, keyed by the 16-byte content digest), not a Python set: a corpus
  of millions of docs would otherwise hold ~100 bytes per doc in memory.
- `first_occurrences`: a batch at once, for a DAG bucket task that holds every doc whose digest falls in its
  bucket (equal texts always meet in one bucket), each with its place in the output order.
Both key docs by `text_digest` (blake2b-128 of the UTF-8 text).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from nanodata.pipeline.shuffle import text_digest

SEEN_CACHE_KIB = 32 * 1024


def digest_of(text: str) -> bytes:
    return text_digest(text.encode("utf-8"))


class SeenTexts:
    """Digests of the texts written so far, on disk; `add(digest)` says whether its text is new."""

    def __init__(self, path: Path):
        self.path = path
        path.unlink(missing_ok=True)  # a killed run's table
        self.db = sqlite3.connect(path)
        for pragma in ("journal_mode=OFF", "synchronous=OFF", f"cache_size=-{SEEN_CACHE_KIB}"):
            self.db.execute(f"PRAGMA {pragma}")
        self.db.execute("CREATE TABLE seen(digest BLOB PRIMARY KEY) WITHOUT ROWID")

    def add(self, digest: bytes) -> bool:
        return self.db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (digest,)).rowcount == 1

    def close(self) -> None:
        self.db.close()
        self.path.unlink(missing_ok=True)


def first_occurrences(his: np.ndarray, los: np.ndarray, place: np.ndarray) -> np.ndarray:
    """Indices (ascending) of the docs to keep: for each digest (his, los: its two 64-bit halves), the doc first
    in output order, `place` (n, k) giving each doc's position as a tuple compared left to right."""
    n = len(his)
    if not n:
        return np.zeros(0, dtype=np.int64)
    ranked = np.lexsort((*[place[:, c] for c in range(place.shape[1] - 1, -1, -1)], los, his))
    first = np.ones(n, dtype=bool)
    first[1:] = (his[ranked][1:] != his[ranked][:-1]) | (los[ranked][1:] != los[ranked][:-1])
    return np.sort(ranked[first])
