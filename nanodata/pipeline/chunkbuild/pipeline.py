"""The passes over a partition of items, and the merge: the work inside the build graph's stages
(nanodata.pipeline.chunkbuild.graph).

A *partition* is a run of items (JSONL records, project files) in input order. The passes:
- local modes (basic, dep-aware): `chunk_items` parses and emits each file in one worker task;
- global modes (cross-file, project, compilable): `parse_items` writes a partition's parsed units
  to a unit store, `globalindex.build_index` reduces every store to the index, `emit_store`
  writes a partition's docs using it, grouped by project rank;
- `merge_docs` concatenates partitions' docs in (rank, partition) order through one JsonlWriter,
  which drops exact duplicates (first occurrence wins).
Every doc depends only on its file and the global index, and the merge order is the input order
(by project rank in project mode), so the output is byte-identical however the items are cut into
partitions, whatever the worker count, and whichever executor runs the graph (the CLI's, or the DAG's tasks).

Workers get at most WINDOW items and WINDOW_BYTES of source each in flight (always at least one file,
however big: a file is parsed whole), so memory holds a bounded number of files whatever the input size;
results come back in input order.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.clangpass import ClangPass, add_resolver, pull_changes
from nanodata.pipeline.chunkbuild.globalindex import GlobalIndex, UnitStore, definitions, stored_files
from nanodata.pipeline.chunkbuild.reuse import FileCache, ReuseTally, text_content_digest
from nanodata.pipeline.chunkbuild.sources import Problem, SourceFile, load_text
from nanodata.pipeline.chunkbuild.stored import UNITS, DocLine, Parsed, Result, signature_array, signature_bytes
from nanodata.pipeline.chunkbuild.writer import (
    JsonlWriter,
    doc_line_of,
    staged_gid,
    staged_line,
)
from nanodata.pipeline.chunking.fidelity import CUTS, add_stats, file_stats
from nanodata.pipeline.chunking.modes import Chunker, Index, whole_file
from nanodata.pipeline.chunking.pack import Doc, counter_for
from nanodata.pipeline.chunking.parse import parse_units
from nanodata.pipeline.cleaning.licenses import allowed
from nanodata.pipeline.cleaning.stages import Drop
from nanodata.pipeline.cleaning.tally import CleaningTally
from nanodata.pipeline.dedup.minhash import signature
from nanodata.pipeline.dedup.near import SignatureSink, is_removed
from nanodata.pipeline.workers import process_pool
from nanodata.settings import GLOBAL_MODES
from nanodata.storage.files import atomic_output

log = logging.getLogger(__name__)
WINDOW = 16            # items in flight per worker
WINDOW_BYTES = 64 << 20  # bytes of source in flight per worker (its docs come back about as big)
PROBLEMS_KEPT = 100
TOO_BIG_KEPT = 10_000  # files over --max-file-bytes the summary names (each is also logged); the rest are counted
MERGE_BATCH = 256   # docs handed to the writer at a time

# ---------------------------------------------------------------- per-file work (in worker processes)

class FileWorker:
    """A pass's per-file work, built once per worker process (or in the parent with one worker) from the run's
    settings (ChunkConfig.worker_settings): the cleaning stages, the token counter, the cache and, when emitting, the
    global index. Each method takes one item and returns its FileResult (or the file's Problem)."""

    def __init__(self, settings: dict):
        self.mode, self.budget, self.cross_depth = settings["mode"], settings["budget"], settings["cross_depth"]
        self.cleaning, self.licenses, self.near = settings["cleaning"], settings["licenses"], settings.get("near")
        self.cache: FileCache | None = settings.get("cache")
        self.counter = counter_for(settings["tokenizer"])
        self.lookup = GlobalIndex(settings["index"]) if settings.get("index") else None
        clang = settings.get("resolver") == "clang" and self.mode in GLOBAL_MODES
        self.clang = ClangPass(settings["clang_timeout_s"], settings.get("scratch"), self.cache) if clang else None

    def license_drop(self, src: SourceFile) -> FileResult | None:
        if self.licenses is None or allowed(src.license, self.licenses):
            return None
        return FileResult(src.gid, src.size, False, project=src.project, source=src.source, path=src.path,
                          drop=Drop("license", f"its project's license is {src.license}"), license=src.license)

    def through_cache(self, src: SourceFile, kind: str, make, ahead: tuple | None):
        """make(src, text) -> FileResult for one file, through the run's cache (reuse.FileCache) when it has one: a
        file whose entry holds its result is never chunked, nor even read when its content digest was planned.
        ahead: its entry as fetched ahead (FileCache.ahead), if it was. Returns the FileResult, or the file's
        Problem when it cannot be read."""
        cache = self.cache
        text, digest = None, src.digest if cache is not None else None
        if digest is None:
            text, problem = load_text(src)
            if problem is not None:
                return problem
        dropped = self.license_drop(src)
        if dropped is not None or cache is None:
            return dropped or make(src, text)
        digest = digest or text_content_digest(text, src.file)
        key = cache.key(kind, digest)
        stored, rebuilt = cache.load(key, ahead)
        if stored is not None:
            return _restored(stored, gid=src.gid, size=src.size, project=src.project, source=src.source,
                             path=src.path, license=src.license, key=key, digest=digest)
        if text is None:
            text, problem = load_text(src)
            if problem is not None:
                return problem
            read = text_content_digest(text, src.file)
            if read != digest:  # changed since it was planned: its entry is filed under what was read
                digest, key = read, cache.key(kind, read)
        return _saved(cache, key, rebuilt, make(src, text), digest)

    def parse(self, src: SourceFile, text: str):
        """(units, near-dedup signature or None, redactions) of a file's text; a FileResult naming its Drop when a
        filter drops it."""
        # the file's one slot for being judged and changed, before it is chunked (counted on the redacted text)
        text, drop, changes = self.cleaning.clean(src.source, text)
        if drop is not None:
            return FileResult(src.gid, src.size, False, project=src.project, source=src.source, path=src.path,
                              drop=drop, license=src.license)
        # the signature is taken where the text is read anyway: near-dedup makes no pass of its own over the input
        sig = signature(text) if self.near is not None else None
        if self.mode == "basic":  # a file that fits is tokenized and emitted: never parsed
            whole = whole_file(text, self.counter, self.budget)
            if whole is not None:
                return whole, sig, changes
        # a node of at most `budget` bytes has at most `budget` tokens: only larger ones are laid out to be cut
        # along the tree (one that fits alone but not inside long namespace/class openers is cut by lines, counted)
        fu = parse_units(text, self.counter.count_batch, with_references=self.mode != "basic",
                         split_bytes=self.budget)
        fu.may_fit = self.mode != "basic"  # (basic mode found it over budget)
        return fu, sig, changes

    def chunked(self, gid: int, source: str, project: str, size: int, fu, rank: int = 0) -> FileResult:
        """A file's docs, as their output lines (writer.doc_line_of), and their fidelity figures (the file's lines
        as its segments hold them). `fu` is a file's one Doc when it fits whole (basic mode: never parsed, so no
        syntax errors are known)."""
        if isinstance(fu, Doc):
            stats = file_stats(fu.text, [fu.text], dict.fromkeys(CUTS, 0))
            return FileResult(gid, size, False, [doc_line_of(fu, self.mode)], rank=rank, project=project,
                              stats=stats, source=source)
        chunker = Chunker(self.mode, self.budget, self.counter, Index({gid: fu}, self.lookup), self.cross_depth)
        docs = chunker.docs(gid, source)
        resolver = pull_changes(chunker.index, gid, source, self.mode) if self.clang is not None else None
        stats = file_stats(fu.whole_text(), [d.text for d in docs],
                           {**chunker.packer.stats, "parse_error_regions": fu.parse_error_regions,
                            "cut_docs": sum(d.cut for d in docs)}, [d.lines for d in docs])
        return FileResult(gid, size, fu.syntax_errors, [doc_line_of(d, self.mode) for d in docs], rank=rank,
                          project=project, stats=stats, source=source, resolver=resolver)

    def _chunk_text(self, src: SourceFile, text: str) -> FileResult:
        parsed = self.parse(src, text)
        if not isinstance(parsed, tuple):
            return parsed
        fu, sig, changes = parsed
        result = self.chunked(src.gid, src.source, src.project, src.size, fu)
        result.signature, result.source, result.path, result.redactions, result.license = (
            sig, src.source, src.path, changes, src.license)
        return result

    def chunk_file(self, src: SourceFile, ahead: tuple | None = None):
        """Local modes: one file in, its docs (and signature) out."""
        return self.through_cache(src, "chunk", self._chunk_text, ahead)

    def _parse_text(self, src: SourceFile, text: str) -> FileResult:
        parsed = self.parse(src, text)
        if not isinstance(parsed, tuple):
            return parsed
        fu, sig, changes = parsed
        return FileResult(src.gid, src.size, fu.syntax_errors, project=src.project, signature=sig,
                          source=src.source, path=src.path, redactions=changes, license=src.license,
                          payload=(UNITS.encode(fu), definitions(fu), fu.includes))

    def parse_file(self, src: SourceFile, ahead: tuple | None = None):
        """Global modes, pass 1: one file in, its units (stored.UNITS), definitions and signature out; with the clang
        resolver, its units annotated with what clang binds (clangpass: after the cache, which keeps tree-sitter's
        part under the file's content alone)."""
        result = self.through_cache(src, "parse", self._parse_text, ahead)
        if self.clang is None or not isinstance(result, FileResult) or result.drop is not None:
            return result
        fu = UNITS.decode(result.payload[0])
        result.usrs, result.resolver, result.clang_key = self.clang.resolve(src, fu, result.digest)
        if result.resolver.get("files_clang"):  # the definitions too: a pulled unit's own pulls go by its USRs
            result.payload = (UNITS.encode(fu), definitions(fu), *result.payload[2:])
        return result

    def emit_file(self, row, ahead: tuple | None = None):
        """Global modes, pass 2: a stored file's docs, with the global index; through the cache, keyed by what the
        file can see (its project's view digest) and its place in its project (ahead: as through_cache's)."""
        gid, source, project, size, _, blob, rank, view, ordinal = row
        if self.cache is None or view is None:
            return self.chunked(gid, source, project, size, UNITS.decode(blob), rank)
        key = self.cache.key("emit", view, ordinal)
        stored, rebuilt = self.cache.load(key, ahead)
        if stored is not None:
            return _restored(stored, gid=gid, size=size, project=project, source=source, rank=rank, key=key)
        return _saved(self.cache, key, rebuilt, self.chunked(gid, source, project, size, UNITS.decode(blob), rank))


_worker: FileWorker | None = None  # this process's, for the pass under way (a pool's initializer makes it)


def start_worker(settings: dict | None) -> None:
    """This process's worker for a pass (None: none, releasing the last one's index and cache)."""
    global _worker
    _worker = None if settings is None else FileWorker(settings)


# what a pool runs: module functions (picklable by name) handing each item to this process's worker
def _chunk_file(src: SourceFile, ahead: tuple | None = None):
    return _worker.chunk_file(src, ahead)


def _parse_file(src: SourceFile, ahead: tuple | None = None):
    return _worker.parse_file(src, ahead)


def _emit_file(row, ahead: tuple | None = None):
    return _worker.emit_file(row, ahead)


def _key_ahead(settings: dict, kind: str, item) -> bytes | None:
    """The key an item's entry is looked up under, when it is known before the item is read (so the entry can be
    fetched ahead): a file's planned content digest or a record's text (as through_cache keys them), an emitted
    file's view; None for a Problem, a file read first, or one its license drops (never looked up)."""
    cache: FileCache = settings["cache"]
    if isinstance(item, Problem):
        return None
    if kind == "emit":
        view, ordinal = item[7:9]
        return None if view is None else cache.key(kind, view, ordinal)
    if settings["licenses"] is not None and not allowed(item.license, settings["licenses"]):
        return None
    digest = item.digest or (text_content_digest(item.text, item.file) if item.text is not None else None)
    return None if digest is None else cache.key(kind, digest)


def _saved(cache: FileCache, key: bytes, rebuilt: bool, result: FileResult, digest: str | None = None) -> FileResult:
    """A result just made, written to its entry and marked with it."""
    cache.save(key, _stored(result))
    result.key, result.rebuilt, result.digest = key, rebuilt, digest
    return result


def _stored(result: FileResult) -> Result:
    """What a file's entry holds (stored.Result): its result without anything that depends on where it sits in the
    input (a doc's source is the run's)."""
    return Result(syntax_errors=result.syntax_errors, docs=result.docs, stats=result.stats,
                  signature=signature_bytes(result.signature), drop=result.drop,
                  redactions=None if result.redactions is None else dict(result.redactions),
                  payload=None if result.payload is None else Parsed(*result.payload))


def _restored(stored: Result, *, source: str, **where) -> FileResult:
    payload = stored.payload
    return FileResult(syntax_errors=stored.syntax_errors, docs=stored.docs, stats=stored.stats,
                      signature=signature_array(stored.signature), drop=stored.drop,
                      redactions=None if stored.redactions is None else Counter(stored.redactions),
                      payload=None if payload is None else (payload.units, payload.definitions, payload.includes),
                      source=source, reused=True, **where)


@dataclass
class FileResult:
    gid: int
    size: int
    syntax_errors: bool
    docs: list[DocLine] = field(default_factory=list)  # as the output holds them (writer.doc_line_of)
    payload: tuple | None = None
    rank: int = 0
    project: str = ""
    stats: dict | None = None   # fidelity.file_stats of its docs
    signature: np.ndarray | None = None  # near-dedup's (minhash.signature), when the run asks for it
    source: str = ""            # the file's names: its docs', near-dedup's summary's and its vendoring rule's
    path: str = ""
    drop: Drop | None = None    # why a filter (or the license allow-list) dropped it: no docs then
    redactions: Counter | None = None  # placeholders put in its text, by kind
    license: str = ""           # its project's SPDX id
    key: bytes | None = None    # its cache entry's key, when the run has a cache (reuse.FileCache)
    reused: bool = False        # read from its entry, not chunked
    rebuilt: bool = False       # its entry was corrupt or truncated: chunked again
    digest: str | None = None   # its content digest (reuse.text_content_digest), when the run has a cache
    usrs: list = field(default_factory=list)  # the clang resolver: (USR, unit number) of its definitions
    resolver: dict | None = None  # the clang resolver's figures (clangpass): how it was resolved, pulls vs names
    clang_key: bytes | None = None  # the key of clang's cache entry it used


def _bytes_of(item) -> int:
    """What an item in flight weighs: a source file's size, a stored file's encoded units (see _emit_file)."""
    return item.size if isinstance(item, SourceFile) else len(item[5])


@contextlib.contextmanager
def _heap_frozen():
    """What is alive when a pass starts (modules, the tokenizer's tables, the caller's state) lives through it, so it
    is frozen for the pass (gc.freeze; forked workers inherit it): the collector's full passes, about one per second
    of chunking, would otherwise walk all of it each time (a few percent of a run). Unfrozen after, so nothing that
    dies in a cycle meanwhile outlives the pass. A process that froze its heap itself keeps it as it is."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _ordered_map(function, kind: str, items, settings: dict, workers: int):
    """function(item, its entry fetched ahead or None) for each item, in input order; Problems pass straight
    through; bounded in flight. With a cache on gs://, the entries of the `kind` pass are fetched ahead
    (reuse.FileCache.ahead) here, while the workers chunk."""
    with _heap_frozen():
        yield from _mapped(function, kind, items, settings, workers)


def _mapped(function, kind: str, items, settings: dict, workers: int):
    cache: FileCache | None = settings.get("cache")
    jobs = (((item, None) for item in items) if cache is None
            else cache.ahead(items, functools.partial(_key_ahead, settings, kind)))
    if workers <= 1:
        start_worker(settings)
        for item, ahead in jobs:
            yield item if isinstance(item, Problem) else function(item, ahead)
        return
    pool = process_pool(workers, start_worker, (settings,))
    try:
        pending: deque = deque()  # (bytes, Problem or AsyncResult)
        in_flight = 0

        def pop():
            nonlocal in_flight
            size, head = pending.popleft()
            in_flight -= size
            return head if isinstance(head, Problem) else head.get()

        for item, ahead in jobs:
            if isinstance(item, Problem):
                pending.append((0, item))
            else:
                pending.append((_bytes_of(item), pool.apply_async(function, (item, ahead))))
                in_flight += pending[-1][0]
            while (len(pending) > WINDOW * workers or in_flight > WINDOW_BYTES * workers
                   or isinstance(pending[0][1], Problem)):
                yield pop()
                if not pending:
                    break
        while pending:
            yield pop()
    finally:
        pool.terminate()
        pool.join()


# ---------------------------------------------------------------- counts of a pass

@dataclass
class Tally:
    """What a pass saw: files and bytes read, problems (counted; the first ones kept), docs written."""
    files_read: int = 0
    bytes_read: int = 0
    syntax_errors: int = 0
    files_skipped: int = 0
    files_failed: int = 0
    docs: int = 0
    tokens: int = 0
    problems: list = field(default_factory=list)
    fidelity: dict = field(default_factory=dict)   # project -> summed fidelity.file_stats
    files_too_big: int = 0  # skipped for --max-file-bytes (also in files_skipped), named in too_big, not problems
    too_big: list = field(default_factory=list)  # {"file", "bytes"}, the first TOO_BIG_KEPT
    files_dropped: int = 0  # read, then dropped by a filter or the license allow-list (named in `cleaning`)
    cleaning: CleaningTally = field(default_factory=CleaningTally)
    reuse: ReuseTally = field(default_factory=ReuseTally)  # files reused from the cache or chunked, per project
    resolver: dict = field(default_factory=dict)  # the clang resolver's figures, per project (clangpass)
    strict: bool = False

    def problem(self, problem: Problem) -> None:
        if self.strict:
            raise NanodataError(f"{problem} (--strict)")
        if problem.status == "skipped":
            self.files_skipped += 1
        else:
            self.files_failed += 1
        if problem.size is not None:
            log.warning("%s", problem)  # every file skipped for its size is named, with its size
            self.files_too_big += 1
            if len(self.too_big) < TOO_BIG_KEPT:
                self.too_big.append({"file": problem.where, "bytes": problem.size})
        elif len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(str(problem))

    def dropped(self, result: FileResult) -> None:
        self.files_read += 1
        self.bytes_read += result.size
        self.files_dropped += 1
        self.cleaning.drop(result.project, result.source, result.size, result.drop, result.license)
        self.reuse.add(result.project, result.size, result.key, result.reused, result.rebuilt)

    def file(self, result: FileResult) -> None:
        self.files_read += 1
        self.bytes_read += result.size
        self.cleaning.kept(result.project, result.redactions, result.license)
        self.reuse.add(result.project, result.size, result.key, result.reused, result.rebuilt)
        if result.clang_key is not None:
            self.reuse.used += result.clang_key
        if result.resolver is not None:
            add_resolver(self.resolver, result.project, result.resolver)
        self.syntax_errors += result.syntax_errors
        self.docs += len(result.docs)
        self.tokens += sum(d.tokens for d in result.docs)
        if result.stats is not None:
            add_stats(self.fidelity, result.project, result.stats)

    def add(self, other: dict) -> None:
        for name in ("files_read", "bytes_read", "syntax_errors", "files_skipped", "files_failed", "files_too_big"):
            setattr(self, name, getattr(self, name) + other.get(name, 0))
        self.problems.extend(other["problems"][:PROBLEMS_KEPT - len(self.problems)])
        for project, stats in other.get("fidelity", {}).items():
            add_stats(self.fidelity, project, stats)
        self.too_big.extend(other.get("too_big", [])[:TOO_BIG_KEPT - len(self.too_big)])

    def counts(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k not in ("strict", "cleaning", "reuse")},
                "cleaning": self.cleaning.to_dict(), "reuse": self.reuse.to_dict()}


def _results(function, kind: str, items, settings: dict, workers: int, tally: Tally, bar):
    """The usable results of function (the `kind` pass) over items, in input order; problems and dropped files
    counted only."""
    for result in _ordered_map(function, kind, items, settings, workers):
        if isinstance(result, Problem):
            tally.problem(result)
        elif result.drop is not None:
            tally.dropped(result)
        else:
            tally.file(result)
            yield result
        if bar is not None:
            bar.update(1)


# ---------------------------------------------------------------- the passes over one partition

def _signed(results, sink: SignatureSink | None):
    """Results passed through, each file's signature handed to the sink (near-dedup's map) on the way."""
    for result in results:
        if sink is not None:
            sink.add(result.gid, result.path, result.size, result.project, result.source, result.signature)
        yield result


def chunk_items(items, settings: dict, workers: int, tally: Tally, bar=None, sink: SignatureSink | None = None):
    """Local modes: each usable item's FileResult (its docs), in input order; signatures to `sink` when given."""
    yield from _signed(_results(_chunk_file, "chunk", items, settings, workers, tally, bar), sink)


def parse_items(items, settings: dict, workers: int, store_path, tally: Tally, bar=None,
                sink: SignatureSink | None = None) -> None:
    """Global modes, map 1: parse a partition's items into a unit store; signatures to `sink` when given."""
    store = UnitStore(store_path)
    try:
        for result in _signed(_results(_parse_file, "parse", items, settings, workers, tally, bar), sink):
            store.add_file(result.gid, result.size, result.syntax_errors, result.source, result.project, result.path,
                           *result.payload, digest=result.digest, usrs=result.usrs)
    finally:
        store.close()


def emit_store(store_path, index_path, settings: dict, workers: int, out_path, tally: Tally, bar=None) -> list:
    """Global modes, map 2: a partition's docs (see staged_line) in (rank, gid) order.
    Returns [(rank, start byte, stop byte)] of each rank's lines in out_path."""
    groups: list[list[int]] = []
    with atomic_output(out_path, durable=False) as out:  # the task's own work file: a power cut redoes the task
        rows = stored_files(store_path, index_path)
        for result in _results(_emit_file, "emit", rows, {**settings, "index": str(index_path)}, workers, tally, bar):
            start = out.tell()
            out.write(b"".join(staged_line(d, result.source, result.gid) for d in result.docs))
            if not groups or groups[-1][0] != result.rank:
                groups.append([result.rank, start, start])
            groups[-1][2] = out.tell()
    return groups


def stage_docs(results, out_path) -> list:
    """Local modes staged for a later merge: a partition's docs (FileResults) as staged lines; one group (rank 0)."""
    with atomic_output(out_path, durable=False) as out:  # as emit_store's
        for result in results:
            out.write(b"".join(staged_line(d, result.source, result.gid) for d in result.docs))
        size = out.tell()
    return [[0, 0, size]]


def merge_docs(staged: list[tuple[int, str, list]], writer: JsonlWriter, removed: np.ndarray | None = None) -> int:
    """Concatenate staged docs in (rank, partition) order into `writer` (which drops exact duplicates), leaving
    out the docs of the files in `removed` (sorted gids: near-copies) first. staged: (partition number, staged docs
    path, groups from emit_store / stage_docs). Returns the docs left out."""
    ranges = sorted((rank, number, path, start, stop) for number, path, groups in staged
                    for rank, start, stop in groups)
    dropped = 0

    def write(batch: list[bytes]) -> None:
        nonlocal dropped
        if removed is not None and len(removed) and batch:
            gone = is_removed(removed, np.array([staged_gid(line) for line in batch], dtype=np.uint64))
            dropped += int(gone.sum())
            batch = [line for line, out in zip(batch, gone.tolist(), strict=True) if not out]
        writer.write_staged(batch)

    for _, _, path, start, stop in ranges:
        with open(path, "rb") as f:
            f.seek(start)
            left, batch = stop - start, []
            while left > 0:
                line = f.readline(left)  # never past the range: the next group may belong later
                if not line:
                    raise NanodataError(f"{path}: staged docs end before byte {stop}")
                left -= len(line)
                batch.append(line)
                if len(batch) >= MERGE_BATCH:
                    write(batch)
                    batch = []
            write(batch)
    return dropped
