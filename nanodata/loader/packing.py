"""Best-fit packing of BOS-prefixed documents into rows of T+1 tokens: nanochat's algorithm, without its scans.

The published rule, for every position of a row: top the buffer up to `buffer_size` docs; place the largest
doc that fits whole (earliest arrival on ties); if none fits, crop the shortest doc (earliest arrival on ties)
to fill the row exactly. "Arrival" is the published buffer index: pops keep the order, new docs go last.

The published code scans the whole buffer for every placement. Here each length has a FIFO bucket (so its
front is the earliest arrival) and `LengthSet`, a two-level bitmap of the non-empty lengths, answers
"largest length <= remaining" and "shortest length" with a few machine-word operations. Docs longer than a row
can never fit; they wait in a heap keyed by (length, arrival) until one is the shortest doc and gets cropped.

crop="discard" drops a cropped doc's tail, as published; crop="requeue" returns the tail to the buffer as a new
doc with BOS prepended, so no token is thrown away.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

import numpy as np

from nanodata.errors import NanodataError

CROP_POLICIES = ("discard", "requeue")


class LengthSet:
    """A set of lengths 1..n as 64-bit words plus a summary word of non-empty words.

    Both queries touch at most two words and the summary: O(1) word operations for n < 4096 and O(n / 4096)
    (a C-level big-int operation) beyond, independent of how many docs are buffered.
    """

    def __init__(self, n: int):
        self.words = [0] * ((n >> 6) + 1)
        self.summary = 0

    def add(self, length: int) -> None:
        w = length >> 6
        word = self.words[w]
        if not word:
            self.summary |= 1 << w
        self.words[w] = word | (1 << (length & 63))

    def discard(self, length: int) -> None:
        w = length >> 6
        word = self.words[w] & ~(1 << (length & 63))
        self.words[w] = word
        if not word:
            self.summary &= ~(1 << w)

    def largest_at_most(self, limit: int) -> int:
        """The largest member <= limit, or 0 if there is none."""
        w = limit >> 6
        word = self.words[w] & ((2 << (limit & 63)) - 1)
        if word:
            return (w << 6) | (word.bit_length() - 1)
        lower = self.summary & ((1 << w) - 1)
        if not lower:
            return 0
        w = lower.bit_length() - 1
        return (w << 6) | (self.words[w].bit_length() - 1)

    def smallest(self) -> int:
        """The smallest member, or 0 if the set is empty."""
        if not self.summary:
            return 0
        w = (self.summary & -self.summary).bit_length() - 1
        word = self.words[w]
        return (w << 6) | ((word & -word).bit_length() - 1)


class BestFitPacker:
    """The document buffer and the best-fit rule. Docs are token lists (or arrays) starting with BOS, kept as the
    tokenizer returned them: converting Python ints costs as much as the packing, so only the tokens placed are
    converted, by the numpy slice assignment that writes them into the row.

    A doc carries an id tuple (opaque here) and an offset: 0 for a whole doc, else the doc is a requeued tail,
    BOS + original[offset:]. `buffered_ids()` lists them in arrival order, with the offset appended to the id
    of a tail, which is all a resume state needs to rebuild the buffer exactly.
    """

    def __init__(self, row_capacity: int, buffer_size: int, bos_token: int, crop: str = "discard"):
        if crop not in CROP_POLICIES:
            raise NanodataError(f"crop must be one of {CROP_POLICIES}, not {crop!r}")
        self.capacity, self.buffer_size, self.bos = row_capacity, buffer_size, bos_token
        self.requeue = crop == "requeue"
        self.cropped_tokens = 0
        self._buckets: dict[int, deque] = {}  # length -> deque of (arrival, tokens, doc_id, offset)
        self._lengths = LengthSet(row_capacity)  # lengths whose bucket is non-empty
        self._too_long: list = []  # heap of (length, arrival, tokens, doc_id, offset), lengths > capacity
        self._live: dict[int, tuple] = {}  # arrival -> state id; dicts keep insertion (= arrival) order
        self._arrivals = 0

    def __len__(self) -> int:
        return len(self._live)

    def add(self, tokens: list[int], doc_id: tuple, offset: int = 0) -> None:
        arrival, n = self._arrivals, len(tokens)
        self._arrivals += 1
        self._live[arrival] = doc_id + (offset,) if offset else doc_id
        if n > self.capacity:
            heapq.heappush(self._too_long, (n, arrival, tokens, doc_id, offset))
            return
        bucket = self._buckets.get(n)
        if bucket is None:
            bucket = self._buckets[n] = deque()
            self._lengths.add(n)
        bucket.append((arrival, tokens, doc_id, offset))

    def buffered_ids(self) -> list[tuple]:
        return list(self._live.values())

    def fill_row(self, row: np.ndarray, refill: Callable[[], bool]) -> int:
        """Fill row[:capacity]; refill() adds one slice of docs and returns False once data has run out
        (only in simulations: the loader's data never ends). Returns how many positions were filled."""
        capacity, buffer_size, live, lengths = self.capacity, self.buffer_size, self._live, self._lengths
        pos = 0
        while pos < capacity:
            while len(live) < buffer_size and refill():
                pass
            if not live:
                break
            remaining = capacity - pos
            length = lengths.largest_at_most(remaining)
            if length:
                row[pos:pos + length] = self._pop_bucket(length)[1]
                pos += length
                continue
            length = lengths.smallest()
            _, tokens, doc_id, offset = self._pop_bucket(length) if length else self._pop_too_long()
            row[pos:capacity] = tokens[:remaining]
            pos = capacity
            if self.requeue:  # the tail is BOS + original[tail_offset:], which is how a resume state names it
                self.add(with_bos(self.bos, tokens[remaining:]), doc_id,
                         remaining if offset == 0 else offset + remaining - 1)
            else:
                self.cropped_tokens += len(tokens) - remaining
        return pos

    def _pop_bucket(self, length: int) -> tuple:
        bucket = self._buckets[length]
        record = bucket.popleft()
        if not bucket:
            del self._buckets[length]
            self._lengths.discard(length)
        del self._live[record[0]]
        return record

    def _pop_too_long(self) -> tuple:
        _, arrival, tokens, doc_id, offset = heapq.heappop(self._too_long)
        del self._live[arrival]
        return arrival, tokens, doc_id, offset


def with_bos(bos: int, tokens):
    """BOS + tokens, of the tokens' kind: an array of their dtype for an array, else a list."""
    if isinstance(tokens, np.ndarray):
        out = np.empty(len(tokens) + 1, dtype=tokens.dtype)
        out[0], out[1:] = bos, tokens
        return out
    return [bos, *tokens]


class _NoRow:
    """A row that ignores writes: a simulation needs only the packing decisions."""

    def __setitem__(self, key, value) -> None:
        pass


def simulate_crop_fraction(doc_lengths, T: int, buffer_size: int = 1000, crop: str = "discard",
                           slice_size: int = 128) -> float:
    """Fraction of tokens cropped when best-fit packing docs of these token lengths (each plus a BOS) into rows
    of T+1, refilled `slice_size` docs at a time as the loader does. The last, partial row is not counted."""
    lengths = [int(n) + 1 for n in doc_lengths]
    total = sum(lengths)
    if total == 0:
        return 0.0
    packer = BestFitPacker(T + 1, buffer_size, bos_token=0, crop=crop)
    next_doc = 0

    def refill() -> bool:
        nonlocal next_doc
        if next_doc >= len(lengths):
            return False
        for i in range(next_doc, min(next_doc + slice_size, len(lengths))):
            packer.add(range(lengths[i]), (i,))  # a range has the doc's length and holds no tokens
        next_doc += slice_size
        return True

    row = _NoRow()
    while packer.fill_row(row, refill) == T + 1:
        pass
    return packer.cropped_tokens / total
