"""Logical streams and mixtures: where a best-fit rank's rows come from.

A logical stream s of N reads row groups s, s+N, s+2N, ... of each file of each source (a DocumentSource with
rank=s, world_size=N) into its own best-fit packer. Rank r of W serves streams r, r+W, ... and fills its rows
from them in turn. N is fixed for the life of a run, so whatever the world size, each stream reads the same
documents in the same order and packs the same rows: handing a stream's saved part to another rank resumes it
exactly, and every document of an epoch is used once across the ranks. With N = W and one source, stream r is
exactly nanochat's rank r: a default run is N = its first world size.

A mixture gives a stream one Feed per source. Each document entering the packer comes from the source whose
tokens taken / weight is smallest (the lowest index on ties): a deterministic stride schedule, so at any moment
each source's tokens are within one document of its weight's share. A document counts for the tokens it can put
in rows: all of them with crop="requeue", at most a row (T+1) with "discard", which crops the rest anyway; so a
rare very long document does not tilt the shares. Each source keeps its own cursor and epoch. Documents enter a
slice's worth at a time, as from one source, so the buffer holds buffer_size..+slice docs either way: refilled a
document at a time it would stay at buffer_size, best-fit would crop about a third more tokens of web-like
lengths (see simulate_crop_fraction's slice_size), and packing would pay for a refill per document.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from operator import itemgetter

from nanodata.errors import NanodataError
from nanodata.loader.lifecycle import start_thread
from nanodata.loader.packing import BestFitPacker, with_bos
from nanodata.loader.source import LoaderClosed

READ_AHEAD = 2  # tokenized slices kept ready per feed when prefetching


class Feed:
    """One source's documents for one stream, in tokenized slices of (tokens, (slot, row group, row)), read ahead
    by a thread when prefetching. `position()` is the source's state right after the last slice handed out.
    With `tag` (the source's index in a mixture), ids are (tag, slot, row group, row), made by the read-ahead
    thread rather than by the packing one."""

    def __init__(self, source, tokenize, prefetch: bool, tag: int | None = None):
        self.source, self._tokenize, self.prefetch, self.tag = source, tokenize, prefetch, tag
        self._slices = None  # started on first use, after any resume has positioned the source
        self._position = None

    def next_slice(self) -> list[tuple[list[int], tuple]]:
        if self._slices is None:
            slices = self._read_and_tokenize()
            # with prefetch, the next slices are read and tokenized while the caller packs
            self._slices = prefetched(slices, READ_AHEAD, self.source.stop) if self.prefetch else slices
        docs, self._position = next(self._slices)
        return docs

    def _read_and_tokenize(self):
        while True:
            texts, ids = self.source.next_slice()
            if self.tag is not None:
                ids = [(self.tag, *doc_id) for doc_id in ids]
            yield list(zip(self._tokenize(texts), ids, strict=False)), self.source.state_dict()

    def read(self, ids) -> list[list[int]]:
        """The tokens of the documents a resume state names, in order."""
        return self._tokenize(self.source.read_docs(ids)) if ids else []

    def state_dict(self, slots) -> dict:
        """The position plus the records of the files it and the given doc slots name."""
        position = self._position if self._slices is not None else self.source.state_dict()
        slots = set(slots)
        if position["cursor_file"] is not None:
            slots.add(self.source.slot(position["cursor_file"]))
        return {**position, "files": self.source.file_records(slots)}


def restore_docs(feeds: list[Feed], slot_maps: list[dict], saved_ids, where: str, tagged: bool):
    """Re-read and re-tokenize saved doc ids [source, slot, row group, row(, offset)] (slots as saved); returns
    (tokens, (source, slot, row group, row), offset) in the saved order. `where`/`tagged` name them in errors."""
    ids = [(source, slot_maps[source][slot], rg_idx, row) for source, slot, rg_idx, row, *_ in saved_ids]
    tokens: list = [None] * len(ids)
    for source, feed in enumerate(feeds):  # one read per source, in the saved order within it
        mine = [i for i, doc_id in enumerate(ids) if doc_id[0] == source]
        for i, doc_tokens in zip(mine, feed.read([ids[i][1:] for i in mine]), strict=False):
            tokens[i] = doc_tokens
    restored = []
    for i, (doc_tokens, doc_id, saved) in enumerate(zip(tokens, ids, saved_ids, strict=False)):
        offset = saved[4] if len(saved) > 4 else 0
        if offset >= len(doc_tokens):
            raise NanodataError(f"resume_state_dict: {where}[{i}][{4 if tagged else 3}] must be below the document's "
                                f"{len(doc_tokens)} tokens, not {offset}")
        restored.append((doc_tokens, doc_id, offset))
    return restored


class Stream:
    """One logical stream: its feeds (one per source), the weighted interleave and its best-fit packer.

    Packer ids are (source, slot, row group, row) when `tagged` (version 3 states), else (slot, row group, row):
    a default run's state, which is nanochat-shaped."""

    def __init__(self, index: int, feeds: list[Feed], weights: list[float], packer: BestFitPacker, tagged: bool,
                 slice_size: int):
        self.index, self.feeds, self.weights, self.packer, self.tagged = index, feeds, weights, packer, tagged
        self.slice_size = slice_size  # documents per mixture refill: a source's slice
        self.taken = [0] * len(feeds)  # tokens each source has put in the buffer, as counted for the shares
        self.counted = packer.capacity if not packer.requeue else float("inf")  # the most a document counts for
        self.pending = [deque() for _ in feeds]  # per source: (tokens, id) read but not yet buffered
        self.refill = self._refill_slice if len(feeds) == 1 else self._refill_mixture

    def _refill_slice(self) -> bool:
        """One source: a whole slice at a time, as nanochat (the buffer then holds buffer_size..+slice docs)."""
        docs = self.feeds[0].next_slice()
        add = self.packer.add
        for tokens, doc_id in docs:
            add(tokens, doc_id)
        if self.tagged:
            self.taken[0] += sum(min(len(tokens), self.counted) for tokens, _ in docs)
        return True

    def _refill_mixture(self) -> bool:
        """Several sources: a slice's worth of documents, each from the source furthest below its share."""
        taken, weights, pending, counted, add = self.taken, self.weights, self.pending, self.counted, self.packer.add
        shares = [t / w for t, w in zip(taken, weights, strict=False)]  # only the drawn source's changes, per document
        others = range(1, len(shares))
        for _ in range(self.slice_size):
            best, lowest = 0, shares[0]
            for i in others:
                if shares[i] < lowest:
                    best, lowest = i, shares[i]
            docs = pending[best]
            if not docs:
                docs.extend(self.feeds[best].next_slice())
            tokens, doc_id = docs.popleft()
            taken[best] += min(len(tokens), counted)
            shares[best] = taken[best] / weights[best]
            add(tokens, doc_id)
        return True

    def restore(self, saved: dict, restart_counts: bool) -> None:
        """Continue from a stream's saved part (version 3's form; a version 2 state converted to it)."""
        slot_maps = [feed.source.load_state_dict(source) for feed, source in zip(self.feeds, saved["sources"], strict=False)]
        where = f"streams[{self.index}]." if self.tagged else ""
        for i, source in enumerate(saved["sources"]):
            ids = [(i, *doc_id) for doc_id in source["pending"]]
            for tokens, doc_id, _ in restore_docs(self.feeds, slot_maps, ids, f"{where}pending", True):
                self.pending[i].append((tokens, doc_id))
        bos = self.packer.bos
        for tokens, doc_id, offset in restore_docs(self.feeds, slot_maps, saved["buffer"], f"{where}buffer",
                                                   self.tagged):
            self.packer.add(with_bos(bos, tokens[offset:]) if offset else tokens,
                            doc_id if self.tagged else doc_id[1:], offset)
        self.taken = [0] * len(self.feeds) if restart_counts else list(saved["taken"])

    def state_dict(self) -> dict:
        """This stream's part of a version 3 state."""
        buffered = self.packer.buffered_ids()
        slots = [set() for _ in self.feeds]
        for source, slot in set(map(itemgetter(0, 1), buffered)):  # a state is made per batch: dedupe in C first
            slots[source].add(slot)
        sources = []
        for i, feed in enumerate(self.feeds):
            pending = [doc_id[1:] for _, doc_id in self.pending[i]]  # source-local ids, as the feed's state
            sources.append({**feed.state_dict(slots[i] | {doc_id[0] for doc_id in pending}), "pending": pending})
        return {"stream": self.index, "taken": list(self.taken), "sources": sources, "buffer": buffered}


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetched(items, depth: int, stop: threading.Event):
    """The same items, produced by a daemon thread that keeps up to `depth` of them ready."""
    ready: queue.Queue = queue.Queue(maxsize=depth)

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def work():
        try:
            for item in items:
                if not put(item):
                    return
        except LoaderClosed:
            return
        except BaseException as exc:  # re-raised in the consumer, where the trainer can see it
            put(_Failure(exc))

    start_thread(stop, work, "nanodata-loader-prefetch")
    while True:
        try:
            item = ready.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                raise LoaderClosed() from None
            continue
        if isinstance(item, _Failure):
            raise item.exc
        yield item
