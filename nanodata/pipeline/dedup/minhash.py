"""A file's MinHash signature, as BigCode shingles it, computed with one pass of numpy.

The published rule (The Stack v1/v2, StarCoder2): lowercase the text, split it on `\\W+`, take 5-grams of
the tokens as the file's set of shingles, and estimate the Jaccard similarity of two files from MinHash
signatures of 256 permutations. BigCode's script hashes every shingle 256 times (~22 signatures/s per core);
we use one-permutation hashing (Li, Owen & Zhang 2012): each shingle is hashed once to 64 bits, its top
9 bits pick one of 512 bins and the rest is its value; a bin keeps its smallest value. Two files agree in a
bin with probability equal to their Jaccard similarity, as with as many permutations, for the cost of one hash
and one sort whatever the bins: so a signature has 512 of them, twice BigCode's, and its estimate's error is
1/sqrt(2) of theirs (about 0.02 at J 0.7, against 0.029), which is what decides a pair near the threshold.
LSH reads the first LSH_BINS (256) of them, as BigCode's 256 permutations would: its cost and candidates are
those of 256 bins. Bins a small file leaves empty are filled by optimal densification (Shrivastava 2017): an
empty bin copies the first filled bin on its own fixed probe sequence, the same for every file, so the
agreement rate stays an estimate of Jaccard.

Everything is vectorized: tokens are runs of word characters found on the code-point array (Python's `\\w`:
str.isalnum() or '_'), each token hashed by a polynomial over its code points (prefix sums modulo 2**64),
each 5-gram by a polynomial over its tokens' hashes, both finished by splitmix64's mixer. Hashes are fixed
functions of the text: the same on every machine, process and numpy version (no PYTHONHASHSEED, no RNG).
"""

from __future__ import annotations

import numpy as np

BIN_BITS = 9
BINS = 1 << BIN_BITS  # the signature's length (BigCode: 256 permutations; see above)
LSH_BINS = 256      # the bins LSH bands are made of
NGRAM = 5           # tokens per shingle (BigCode)
EMPTY = np.uint32(0xFFFFFFFF)
_VALUE_BITS = 64 - BIN_BITS  # a shingle hash: the bin, then its value (the signature keeps the low 32 bits)
_PROBES = 256       # densification's probe sequence per bin, before its fallback (the next filled bin)

_U64 = np.uint64
_TOKEN_BASE = _U64(0x100000001B3)          # odd: invertible modulo 2**64
_GRAM_BASE = _U64(0x9E3779B97F4A7C15)
_ASCII_WORD = np.array([chr(c).isalnum() or chr(c) == "_" for c in range(128)])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise (uint64 arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


class _Powers:
    """BASE**i and BASE**-i modulo 2**64 for i < n, grown on demand (a polynomial hash of any substring)."""

    def __init__(self):
        self.up = self.down = np.ones(0, dtype=np.uint64)

    def get(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self.up) < n:
            size = max(n, 2 * len(self.up), 1 << 16)
            inverse = _U64(pow(int(_TOKEN_BASE), -1, 1 << 64))
            with np.errstate(over="ignore"):
                self.up = np.concatenate(([_U64(1)], np.cumprod(np.full(size - 1, _TOKEN_BASE, dtype=np.uint64))))
                self.down = np.concatenate(([_U64(1)], np.cumprod(np.full(size - 1, inverse, dtype=np.uint64))))
        return self.up[:n], self.down[:n]


_POWERS = _Powers()


def _word_mask(points: np.ndarray) -> np.ndarray:
    """True where a code point is a `\\w` character (ASCII by table, the rest by str.isalnum per distinct point)."""
    mask = np.zeros(len(points), dtype=bool)
    ascii_ = points < 128
    mask[ascii_] = _ASCII_WORD[points[ascii_]]
    if not ascii_.all():
        wide = ~ascii_
        distinct, inverse = np.unique(points[wide], return_inverse=True)
        mask[wide] = np.array([chr(c).isalnum() for c in distinct.tolist()])[inverse]
    return mask


def token_hashes(text: str) -> np.ndarray:
    """A 64-bit hash of each `\\W+`-separated token of text.lower(), in order."""
    points = np.frombuffer(text.lower().encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    mask = _word_mask(points)
    edges = np.flatnonzero(np.diff(mask.view(np.int8), prepend=0, append=0))
    starts, ends = edges[0::2], edges[1::2]
    if not len(starts):
        return np.zeros(0, dtype=np.uint64)
    up, down = _POWERS.get(len(points) + 1)
    with np.errstate(over="ignore"):
        prefix = np.concatenate(([_U64(0)], np.cumsum(points.astype(np.uint64) * up[:len(points)])))
        return _mix((prefix[ends] - prefix[starts]) * down[starts])


def shingle_hashes(text: str) -> np.ndarray:
    """A 64-bit hash of each 5-gram of tokens (empty when the text has fewer than 5 tokens)."""
    tokens = token_hashes(text)
    n = len(tokens) - NGRAM + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = tokens[:n].copy()
        for k in range(1, NGRAM):
            h = h * _GRAM_BASE + tokens[k:k + n]
        return _mix(h)


def _probe_table() -> np.ndarray:
    """For each bin, the fixed sequence of bins an empty one looks at (densification)."""
    i = np.arange(BINS, dtype=np.uint64)[:, None] * _U64(_PROBES) + np.arange(_PROBES, dtype=np.uint64)[None, :]
    return (_mix(i + _U64(0x632BE59BD9B4E019)) >> _U64(64 - BIN_BITS)).astype(np.intp)


_PROBE = _probe_table()


def signature_of(hashes: np.ndarray) -> np.ndarray | None:
    """The BINS-long uint32 signature of a set of shingle hashes (None for an empty set)."""
    if not len(hashes):
        return None
    ordered = np.sort(hashes)
    bins = (ordered >> _U64(_VALUE_BITS)).astype(np.intp)
    first = np.flatnonzero(np.diff(bins, prepend=-1))  # a bin's smallest hash comes first in sorted order
    signature = np.full(BINS, EMPTY, dtype=np.uint32)
    signature[bins[first]] = (ordered[first] & _U64(0xFFFFFFFF)).astype(np.uint32)
    if len(first) < BINS:
        filled = np.zeros(BINS, dtype=bool)
        filled[bins[first]] = True
        empty = np.flatnonzero(~filled)
        hits = filled[_PROBE[empty]]
        found = hits.any(axis=1)
        source = _PROBE[empty, hits.argmax(axis=1)]
        # past the probes (a set of one or two shingles): the next filled bin, circularly
        order = np.flatnonzero(filled)
        nxt = order[np.searchsorted(order, empty[~found]) % len(order)]
        source[~found] = nxt
        signature[empty] = signature[source]
    return signature


def signature(text: str) -> np.ndarray | None:
    """The text's signature, or None when it has fewer than NGRAM tokens (such a file is never a near-copy)."""
    return signature_of(shingle_hashes(text))


def jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Estimated Jaccard similarity: the share of bins two signatures agree in (rows against a row, or two rows)."""
    return np.count_nonzero(a == b, axis=-1) / BINS


def lsh_shape(threshold: float, recall: float = 0.95) -> tuple[int, int]:
    """(bands, rows) for a Jaccard threshold: the most rows per band (fewest false candidates to verify) that still
    make a pair at exactly the threshold a candidate with probability >= recall; bands * rows <= LSH_BINS."""
    for rows in range(LSH_BINS, 0, -1):
        bands = LSH_BINS // rows
        if 1 - (1 - threshold ** rows) ** bands >= recall:
            return bands, rows
    return LSH_BINS, 1


def band_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) uint64: one hash per band of each signature (n, BINS), made of its first bands * rows bins; two
    files are LSH candidates when they share a band's key."""
    parts = signatures[:, :bands * rows].reshape(len(signatures), bands, rows).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = np.zeros(parts.shape[:2], dtype=np.uint64)
        for r in range(rows):
            key = key * _GRAM_BASE + parts[:, :, r]
        return _mix(key)
