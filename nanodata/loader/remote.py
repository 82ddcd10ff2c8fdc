"""The loader's file access: a corpus directory on local disk or at gs://bucket/prefix, read in place.

`open_shards(data_dir, ...)` gives DocumentSource one object for both:
- LocalShards: pyarrow reads the files; listing and the train/val rule are nanodata.dataset's.
- BucketShards: the objects directly under gs://bucket/prefix, never written or deleted:
  * listing: one delimited listing (streamed page by page), the same train/val rule as a directory; each
    parquet object is pinned at first sight to its (size, generation, crc32c). A later listing, or the stat
    taken each time the loader starts reading an object, that shows another version is an error naming the
    object and both versions: never other data, never a mix;
  * an object is opened by one ranged GET of its tail (the footer; the state's footer digest), a row group
    by one ranged GET of its `text` column chunk, pinned to the generation (real GCS answers 404 for a
    replaced object and names the generation it sent; a server that does not, as the emulator, is asked for
    the object's version after each read; a short body is checked too). pyarrow decodes the chunk from memory
    exactly as it decodes a local file, so the batches are those of the same corpus on local disk;
  * read-ahead: FETCH_THREADS daemon threads fetch the next row groups of this rank's order, up to
    READ_AHEAD_BYTES beyond the one being read, so GCS latency overlaps tokenization;
  * cache (only with cache_dir): fetched chunks kept on local disk under cache_dir/nanodata-cache/, at most
    cache_bytes (temporary files included) for the whole process, verified by crc32c when read back. It deletes
    only files it wrote (its own names in its own subdirectory): entries of objects no longer listed or
    replaced, and those beyond a smaller cache_bytes than the last run's; when full it stores nothing more: an
    epoch reads the corpus in the same order each time, where LRU would evict every entry just before its next
    use;
  * faults: every request runs under the one retry policy (nanodata.storage.retry): 5xx, 429, dropped
    connections, short bodies and a listed object missing for a moment are retried with backoff; what
    stays wrong is one NanodataError naming the object.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import queue
import re
import threading
import weakref
from concurrent.futures import Future
from pathlib import Path

from nanodata.corpus.layout import COMPLETE, MANIFEST, split_names
from nanodata.dataset import (
    RemoteParquet,
    corpus_location,
    files_for_split,
    footer_digest,
    list_parquet_files,
    manifest_checksums,
    open_parquet,
    parquet_fingerprint,
    read_manifest,
    read_texts,
)
from nanodata.errors import NanodataError
from nanodata.loader.lifecycle import start_thread
from nanodata.ranges import CACHE_BYTES
from nanodata.storage.files import atomic_write, crc32c_name, temp_name
from nanodata.storage.gcs import Bucket, ObjectInfo, replaced
from nanodata.storage.retry import one_line

log = logging.getLogger("nanodata.loader")

DEFAULT_CACHE_BYTES = CACHE_BYTES.default
READ_AHEAD_BYTES = 64 << 20  # fetched beyond the row group being read (at least one row group)
FETCH_THREADS = 4  # parallel ranged GETs: GCS throughput per connection is limited, latency is not CPU


class LoaderClosed(Exception):
    """Raised inside a waiting reader when its loader was closed, so a background thread can end."""


def open_shards(data_dir, *, stop: threading.Event, cache_dir=None, cache_bytes: int = DEFAULT_CACHE_BYTES):
    """The files of one corpus location for one reader: a directory, or a gs:// prefix with its read-ahead and, with
    cache_dir, the process's cache there."""
    location = corpus_location(data_dir)
    if isinstance(location, Path):
        return LocalShards(location)
    cache = None
    if cache_dir is not None and cache_bytes > 0:
        cache = RowGroupCache.shared(Path(cache_dir), cache_bytes)
    return BucketShards(location, stop, cache)


def check_cache_args(cache_dir, cache_bytes) -> None:
    """cache_bytes an integer >= 0; cache_dir None or a directory (or a path where one can be made)."""
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
        raise NanodataError(f"cache_bytes must be an integer >= 0, not {cache_bytes!r}")
    if cache_dir is not None:
        existing = next(p for p in (Path(cache_dir), *Path(cache_dir).parents) if p.exists())
        if not existing.is_dir():
            raise NanodataError(f"cache_dir {cache_dir}: {existing} is not a directory")


# -- local directories -------------------------------------------------------------------------------------
class LocalShards:
    def __init__(self, root: Path):
        self.root = root
        self._checksums: dict[str, str] = {}

    def label(self, name: str) -> str:
        return str(self.root / name)

    def split_names(self, split: str) -> list[str]:
        return [p.name for p in files_for_split(split, self.root)]

    def streaming_names(self, split: str) -> list[str]:
        if not self.root.is_dir():
            return []
        names = [p.name for p in list_parquet_files(self.root)]
        return _present_split(names, read_manifest(self.root), split)

    def complete(self) -> bool:
        return (self.root / COMPLETE).exists()

    def exists(self, name: str) -> bool:
        return (self.root / name).is_file()

    def parquet(self, name: str):
        return open_parquet(self.root / name)

    def texts(self, name: str, pf, rg_idx: int, upcoming=(), stride: int = 1) -> list[str]:
        return read_texts(pf, self.root / name, rg_idx)

    def fingerprint(self, name: str) -> list:
        if name not in self._checksums:  # a manifest is written once, after the shards it lists
            self._checksums = manifest_checksums(self.root)
        return [*parquet_fingerprint(self.root / name), self._checksums.get(name)]


def _present_split(names: list[str], manifest, split: str) -> list[str]:
    """A growing corpus's finished files of a split: val only when explicit, manifest names only once present."""
    train, val = split_names(names, manifest, explicit_val=True)
    present = set(names)
    return [name for name in (train if split == "train" else val) if name in present]


# -- gs:// objects -------------------------------------------------------------------------------------------
class BucketShards:
    """A gs:// corpus location for one reader: pinned listing, row groups by ranged reads, read-ahead, cache."""

    def __init__(self, uri: str, stop: threading.Event, cache: RowGroupCache | None):
        self.bucket = Bucket(uri, stop)
        self.cache, self.cache_location = cache, _digest(self.bucket.uri)[:16]
        self.pinned: dict[str, ObjectInfo] = {}  # parquet object -> the version this loader reads
        self.opened: dict[str, RemoteParquet] = {}
        self.lock = threading.Lock()
        self.ahead = ReadAhead(self._fetch, stop)

    def label(self, name: str) -> str:
        return self.bucket.label(name)

    # -- listing ---------------------------------------------------------------------------------------------
    def _parquet_names(self) -> tuple[list[str], dict | None]:
        """Sorted parquet names (each pinned) and the manifest, if listed."""
        listing = self.bucket.list()
        names = sorted(name for name in listing if name.endswith(".parquet"))
        with self.lock:
            for name in names:
                self._pin(name, listing[name])
        if self.cache is not None:
            self.cache.retain(self.cache_location, {_object_key(name, listing[name]) for name in names})
        manifest = read_manifest(self.bucket.uri) if MANIFEST in listing else None
        return names, manifest

    def _pin(self, name: str, info: ObjectInfo) -> None:
        was = self.pinned.setdefault(name, info)
        if was != info:
            raise replaced(self.label(name), was, info)

    def split_names(self, split: str) -> list[str]:
        names, manifest = self._parquet_names()
        if not names:
            raise NanodataError(f"{self.bucket.uri}: no .parquet files")
        train, val = split_names(names, manifest)
        chosen = train if split == "train" else val
        if not chosen:
            raise NanodataError(f"{self.bucket.uri}: no {split} files ({len(names)} parquet file(s) found; "
                                f"without a manifest or val*.parquet the last file is val, so train needs at least 2)")
        return chosen

    def streaming_names(self, split: str) -> list[str]:
        names, manifest = self._parquet_names()
        return _present_split(names, manifest, split)

    def complete(self) -> bool:
        return self.bucket.stat(COMPLETE) is not None

    def exists(self, name: str) -> bool:
        return self.bucket.stat(name) is not None

    # -- reading ---------------------------------------------------------------------------------------------
    def parquet(self, name: str) -> RemoteParquet:
        """The object opened at its pinned version, checked against the bucket now: the loader starts on it."""
        now = self.bucket.current(name, self.pinned.get(name))
        with self.lock:
            self._pin(name, now)
        return self._result(("open", name))

    def texts(self, name: str, handle: RemoteParquet, rg_idx: int, upcoming=(), stride: int = 1) -> list[str]:
        """Row group rg_idx's texts; `upcoming` ((name, first row group), ...) with `stride` is the read order
        after it, for read-ahead."""
        data = self._result(("rg", name, rg_idx), lambda: self._read_ahead(upcoming, stride))
        start, _ = handle.chunk(rg_idx)
        # on this thread only (no pyarrow pool thread calling back into Python), from a file that refuses reads
        # once the loader stops: nothing of pyarrow is left in flight for exit to wait on
        return read_texts(handle.parquet_file({start: data}, self.ahead.stop), self.label(name), rg_idx,
                          use_threads=False)

    def _result(self, key: tuple, then=None):
        """key's fetched result: read ahead if it was, else fetched now; `then()` runs before the wait."""
        future = self.ahead.claim(key)
        if then is not None:
            then()
        if future is None:
            return self._fetch(key)
        while True:
            try:
                return future.result(timeout=0.5)
            except TimeoutError:
                if self.ahead.stop.is_set():  # the loader closed; its read-ahead threads are gone
                    raise LoaderClosed() from None

    def fingerprint(self, name: str) -> list:
        """[bytes, footer digest, crc32c]: the object's own crc32c, which equals a manifest's for the same file."""
        handle = self.opened.get(name) or self.parquet(name)
        return [handle.info.size, footer_digest(handle.tail), handle.info.crc32c]

    def _open(self, name: str) -> RemoteParquet:
        with self.lock:
            if name in self.opened:
                return self.opened[name]
            info = self.pinned[name]
        handle = RemoteParquet(self.bucket, name, info)
        with self.lock:
            return self.opened.setdefault(name, handle)

    def _fetch(self, key: tuple):
        """What a read-ahead key stands for: ("open", name) an opened object, ("rg", name, i) chunk bytes."""
        if key[0] == "open":
            return self._open(key[1])
        _, name, rg_idx = key
        handle = self._open(name)
        if rg_idx >= handle.num_row_groups:  # read ahead past a file's end: nothing to fetch
            return b""
        start, stop = handle.chunk(rg_idx)
        if start == stop:  # no text column: read_texts names the file
            return b""
        cache_key = (self.cache_location, _object_key(name, handle.info), rg_idx)
        data = self.cache.get(cache_key) if self.cache is not None else None
        if data is None:
            data = self.bucket.read(name, handle.info, start, stop)
            if self.cache is not None:
                self.cache.put(cache_key, data)
        return data

    def _read_ahead(self, upcoming, stride: int) -> None:
        """Ask for the row groups that follow in the read order, up to READ_AHEAD_BYTES; an object not opened
        yet is opened first (its row groups are asked for on a later call)."""
        wanted, budget = [], READ_AHEAD_BYTES
        for name, first in upcoming:
            handle = self.opened.get(name)
            if handle is None:  # its first row group is fetched with it; the rest once it is open
                if name in self.pinned:
                    wanted += [("open", name), ("rg", name, first)]
                break
            for rg_idx in range(first, handle.num_row_groups, stride):
                key = ("rg", name, rg_idx)
                if key in wanted:  # the order came round to itself (a static corpus smaller than the budget)
                    break
                wanted.append(key)
                start, stop = handle.chunk(rg_idx)
                budget -= stop - start
                if budget <= 0:
                    break
            if budget <= 0:
                break
        self.ahead.want(wanted)


def _object_key(name: str, info: ObjectInfo) -> str:
    """A cache entry's object part: the name and version, digested (a file name of fixed length)."""
    return _digest(f"{name}\0{info.generation}\0{info.size}")[:24]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- read-ahead ----------------------------------------------------------------------------------------------
class ReadAhead:
    """Fetches wanted keys in daemon threads, in the order wanted; keeps each result until taken or unwanted."""

    def __init__(self, fetch, stop: threading.Event, threads: int = FETCH_THREADS):
        self.fetch, self.stop, self.threads = fetch, stop, threads
        self.pending: dict[tuple, Future] = {}
        self.tasks: queue.Queue = queue.Queue()
        self.lock = threading.Lock()
        self.workers: list[threading.Thread] = []

    def want(self, keys: list[tuple]) -> None:
        with self.lock:
            for key in [key for key in self.pending if key not in keys]:
                self.pending.pop(key).cancel()  # a running fetch finishes; its result is dropped
            for key in keys:
                if key not in self.pending:
                    self.pending[key] = future = Future()
                    self.tasks.put((key, future))
            self.workers = [worker for worker in self.workers if worker.is_alive()]
            while len(self.workers) < min(self.threads, len(self.pending)) and not self.stop.is_set():
                self.workers.append(start_thread(self.stop, self._work, "nanodata-loader-read-ahead"))

    def claim(self, key: tuple) -> Future | None:
        """The future of a wanted key, no longer kept here (so a later `want` cannot drop it), or None."""
        with self.lock:
            return self.pending.pop(key, None)

    def _work(self) -> None:
        while not self.stop.is_set():
            try:
                key, future = self.tasks.get(timeout=0.2)
            except queue.Empty:
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(self.fetch(key))
            except BaseException as exc:  # re-raised where the result is taken, naming the object
                future.set_exception(exc)


# -- the local cache -----------------------------------------------------------------------------------------
CACHE_SUBDIR = "nanodata-cache"
# corpus location key, object key, row group, crc32c of the bytes
ENTRY = re.compile(r"([0-9a-f]{16})-([0-9a-f]{24})-(\d+)-([0-9a-f]{8})\.rg")


class RowGroupCache:
    """Chunks on local disk in cache_dir/nanodata-cache/, at most `limit` bytes in files (temporary ones included).
    One per directory in a process, shared by all its loaders, logical streams and mixture sources (a chunk is
    the same bytes whoever reads it, and one budget bounds them all; the latest loader's limit applies); another
    process using the directory is refused. Deletes only its own entries."""

    _open: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
    _open_lock = threading.Lock()

    @classmethod
    def shared(cls, cache_dir: Path, limit: int) -> RowGroupCache:
        with cls._open_lock:
            cache = cls._open.get(cache_dir.resolve())
            if cache is None:
                cache = cls._open[cache_dir.resolve()] = cls(cache_dir, limit)
            cache.limit = limit
        cache._fit()
        return cache

    def __init__(self, cache_dir: Path, limit: int):
        self.dir, self.limit = cache_dir / CACHE_SUBDIR, limit
        self.lock = threading.Lock()
        self.entries: dict[tuple[str, str, int], tuple[Path, int, str]] = {}
        self.writing: set[tuple[str, str, int]] = set()
        self.used = 0
        self.failed = False
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(self.dir / ".lock", "w")
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise NanodataError(f"cache_dir {cache_dir}: in use by another process; give each loader process its "
                                f"own cache_dir") from None
        except OSError as exc:
            raise NanodataError(f"cache_dir {cache_dir}: unusable ({exc.strerror})") from None
        for path in self.dir.iterdir():
            match = ENTRY.fullmatch(path.name)
            if match:
                size = path.stat().st_size
                self.entries[match[1], match[2], int(match[3])] = (path, size, match[4])
                self.used += size
            elif path.name.endswith(".rg.tmp") and ENTRY.fullmatch(path.name[:-4]):
                path.unlink()  # our own write cut short by a crash

    def get(self, key: tuple[str, str, int]) -> bytes | None:
        with self.lock:
            entry = self.entries.get(key)
        if entry is None:
            return None
        path, size, crc = entry
        try:
            data = path.read_bytes()
        except OSError:
            data = None
        if data is not None and len(data) == size and crc32c_name(data) == crc:
            return data
        log.warning("nanodata loader cache: %s is damaged; fetching it again", path)
        self._evict([key])
        return None

    def put(self, key: tuple[str, str, int], data: bytes) -> None:
        crc = crc32c_name(data)
        path = self.dir / f"{key[0]}-{key[1]}-{key[2]}-{crc}.rg"
        with self.lock:
            if self.failed or key in self.entries or key in self.writing or self.used + len(data) > self.limit:
                return  # full: keep what is cached (the order repeats each epoch)
            self.used += len(data)  # reserved before the temporary file exists: the bound holds while writing
            self.writing.add(key)
        try:
            atomic_write(path, data)
        except (OSError, NanodataError) as exc:  # a full disk or a removed directory: the loader goes on
            log.warning("nanodata loader cache: not caching any more (%s)", one_line(exc))
            temp_name(path).unlink(missing_ok=True)
            with self.lock:
                self.failed = True
                self.writing.discard(key)
                self.used -= len(data)
            return
        with self.lock:
            self.writing.discard(key)
            self.entries[key] = (path, len(data), crc)

    def retain(self, location: str, objects: set[str]) -> None:
        """Evict the entries of a location's objects not in `objects` (keys of the versions listed now)."""
        with self.lock:
            stale = [key for key in self.entries if key[0] == location and key[1] not in objects]
        self._evict(stale)

    def _fit(self) -> None:
        """Evict entries (left by an earlier run with a larger limit) until they fit the limit."""
        with self.lock:
            over, excess = [], self.used - self.limit
            for key, (_, size, _) in self.entries.items():
                if excess <= 0:
                    break
                over.append(key)
                excess -= size
        self._evict(over)

    def _evict(self, keys) -> None:
        for key in keys:
            with self.lock:
                entry = self.entries.pop(key, None)
            if entry is not None:
                entry[0].unlink(missing_ok=True)
                with self.lock:  # only once the file is gone, so that the bound holds on disk meanwhile
                    self.used -= entry[1]
