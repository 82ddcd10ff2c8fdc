"""Copy a corpus between a local directory and gs://bucket/prefix: ordered, idempotent, verified.

The published upload/download loops polled with `gcloud storage cp` and could exit after the
sentinel while a shard that landed between two listings was never copied. Here:
- data files go first (in parallel), then `manifest.json`, then `_COMPLETE`, and the sentinel
  is copied only if nothing failed and every file the manifest names is at the destination;
- `--watch` keeps syncing until it sees the source's `_COMPLETE`, then lists once more;
- a file whose size and crc32c already match at the destination is skipped, so a re-run
  after any failure copies exactly what is missing;
- downloads land in `name.tmp`, are checked against the object's crc32c, then renamed;
- every GCS call runs under the one retry policy (nanodata.transfer), and a full local disk stops the sync
  with one line naming the file (never retried, nothing partial under a final name).
Writers' work files (`*.tmp`, `_*` such as `_progress.json`; `_COMPLETE` excepted) are not copied.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path


from nanodata.dataset import COMPLETE, MANIFEST
from nanodata.errors import NanodataError
from nanodata.files import atomic_output, atomic_write, file_digest
from nanodata.transfer import (CorruptTransfer, check_range, check_retry_args, is_network_error, land, one_line,
                               with_retries)

log = logging.getLogger(__name__)

RESUMABLE_THRESHOLD = 8 * 1024 * 1024  # larger files use a chunked resumable upload
RESUMABLE_CHUNK = 8 * 1024 * 1024  # must be a multiple of 256 KiB
TIMEOUT = (10, 120)  # (connect, read) seconds per HTTP request
COPY_BLOCK = 1 << 20


@dataclass(frozen=True)
class Entry:
    size: int
    crc32c: str  # base64 of the big-endian CRC32C, as GCS reports it


# ---------------------------------------------------------------- checksums and names

def is_synced_name(name: str) -> bool:
    """Finished corpus files only: writers' temp and work files stay where they are."""
    base = name.rsplit("/", 1)[-1]
    return not (name.endswith(".tmp") or base.startswith(".") or (base.startswith("_") and base != COMPLETE))


def safe_relative_name(name: str, where: str) -> str:
    """An object name that stays inside the destination directory, or a NanodataError."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise NanodataError(f"{where}: object name {name!r} would escape the destination "
                            f"(empty, absolute or '..' path component); refusing to sync it")
    return name


# GCS bucket names: lowercase letters, digits, '.', '-', '_', starting and ending with a letter or digit;
# 3-63 characters, or up to 222 with dots when each dot-separated part has at most 63
BUCKET_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")


def valid_bucket_name(name: str) -> bool:
    parts = name.split(".")
    return (BUCKET_NAME.fullmatch(name) is not None and 3 <= len(name) <= (222 if len(parts) > 1 else 63)
            and all(1 <= len(part) <= 63 for part in parts))


def parse_gs(uri: str) -> tuple[str, str] | None:
    """gs://bucket/prefix → (bucket, 'prefix/'); a local path → None; a malformed gs:// URI → NanodataError."""
    if not uri.startswith("gs://"):
        if uri[:3].lower() == "gs:":  # gs:/b, GS://b: a typo, not a local directory named 'gs:'
            raise NanodataError(f"{uri!r}: malformed gs:// URI (expected gs://bucket/prefix)")
        return None
    bucket, _, prefix = uri[len("gs://"):].partition("/")
    if not bucket:
        raise NanodataError(f"{uri!r}: no bucket name (expected gs://bucket/prefix)")
    if not valid_bucket_name(bucket):
        raise NanodataError(f"{uri!r}: invalid bucket name {bucket!r}: GCS bucket names are 3-63 characters of "
                            f"lowercase letters, digits, '.', '-' and '_', starting and ending with a letter or digit")
    prefix = prefix.strip("/")
    if prefix and (any(p in ("", ".", "..") for p in prefix.split("/")) or "\n" in prefix or "\r" in prefix):
        raise NanodataError(f"{uri!r}: malformed gs:// URI (empty, '.' or '..' path component, or a line break)")
    return bucket, (prefix + "/" if prefix else "")


# ---------------------------------------------------------------- client and retries

_local = threading.local()


def gcs_client():
    """A client per thread, pointed at STORAGE_EMULATOR_HOST when set (anonymous), else ADC."""
    from google.cloud import storage

    # The client would otherwise GET each bucket's metadata in a background thread, only to label OpenTelemetry
    # spans: an extra request per bucket and thread, retried by the client's own policy instead of ours.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    cached = getattr(_local, "client", None)
    if cached is not None and cached[0] == emulator:
        return cached[1]
    if emulator:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "nanodata-emulator"),
                                credentials=AnonymousCredentials())
    else:
        import google.auth.exceptions

        try:
            client = storage.Client()
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise NanodataError(f"no Google credentials for gs:// ({exc}); run `gcloud auth application-default "
                                f"login`, set GOOGLE_APPLICATION_CREDENTIALS, or STORAGE_EMULATOR_HOST") from None
    _local.client = (emulator, client)
    return client


def iter_blobs(bucket: str, prefix: str, what: str, delimiter: str | None = None, **retry):
    """The objects under a prefix, streamed page by page (never held whole), each page fetched under the one
    retry policy (`retry`: attempts, backoff, deadline): a listing's pages are requested while it is iterated,
    so wrapping the list call alone would retry nothing."""
    token = None
    while True:
        def fetch_page():
            blobs = gcs_client().list_blobs(bucket, prefix=prefix, delimiter=delimiter, page_token=token,
                                            retry=None, timeout=TIMEOUT)
            page = next(blobs.pages, None)
            return ([] if page is None else list(page)), blobs.next_page_token

        items, token = with_retries(fetch_page, what, **retry)
        yield from items
        if not token:
            return


# ---------------------------------------------------------------- the two kinds of side

class LocalSide:
    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.uri = str(self.root)
        self._crc_cache: dict[tuple[str, int, int], str] = {}

    def path(self, name: str) -> Path:
        return self.root.joinpath(*name.split("/"))

    def list(self) -> dict[str, Entry]:
        if not self.root.is_dir():
            return {}
        names = (p.relative_to(self.root).as_posix() for p in sorted(self.root.rglob("*")) if p.is_file())
        return {name: self.entry(name) for name in names if is_synced_name(name)}

    def entry(self, name: str) -> Entry:
        path = self.path(name)
        st = path.stat()  # crc cached by (path, size, mtime) so a watch loop does not re-read every shard
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in self._crc_cache:
            self._crc_cache[key] = file_digest(path, "crc32c")
        return Entry(st.st_size, self._crc_cache[key])

    def read_into(self, name: str, fileobj) -> None:
        with open(self.path(name), "rb") as f:
            shutil.copyfileobj(f, fileobj, COPY_BLOCK)

    def receive(self, name: str, expected: Entry, fill) -> None:
        """fill(fileobj) writes the bytes to `name.tmp`; renamed into place only if the crc32c matches."""
        def verify(tmp: Path) -> None:
            got = file_digest(tmp, "crc32c")
            if got != expected.crc32c:
                raise CorruptTransfer(f"{name}: crc32c {got} after transfer, source says {expected.crc32c}")

        land(self.path(safe_relative_name(name, self.uri)), fill, verify)

    def delete(self, name: str) -> None:
        self.path(name).unlink()


class GcsSide:
    def __init__(self, uri: str, retry: dict | None = None):
        self.uri = uri.rstrip("/")
        self.bucket_name, self.prefix = parse_gs(uri)
        self.retry = retry or {}  # attempts, backoff, deadline of the one retry policy (its defaults if empty)

    def blob(self, name: str, chunk_size: int | None = None):
        return gcs_client().bucket(self.bucket_name).blob(self.prefix + name, chunk_size=chunk_size)

    def list(self) -> dict[str, Entry]:
        from google.api_core.exceptions import NotFound

        try:
            blobs = iter_blobs(self.bucket_name, self.prefix, f"list {self.uri}", **self.retry)
            listing = [(b.name, b.size, b.crc32c) for b in blobs]
        except NotFound:
            raise NanodataError(f"{self.uri}: bucket {self.bucket_name!r} does not exist") from None
        except Exception as exc:
            if not is_network_error(exc):
                raise
            raise NanodataError(f"{self.uri}: cannot list the objects: {one_line(exc)}") from None
        out = {}
        for full, size, crc in listing:
            name = full[len(self.prefix):]
            if is_synced_name(name):
                out[name] = Entry(int(size), crc)
        return out

    def read_into(self, name: str, fileobj) -> None:
        self.blob(name).download_to_file(fileobj, checksum=None, retry=None, timeout=TIMEOUT)

    def send(self, name: str, path: Path, entry: Entry) -> None:
        blob = self.blob(name, RESUMABLE_CHUNK if entry.size > RESUMABLE_THRESHOLD else None)
        blob.upload_from_filename(str(path), checksum="crc32c", retry=None, timeout=TIMEOUT)
        if blob.crc32c != entry.crc32c:  # the server's own checksum of what it stored
            raise CorruptTransfer(f"{name}: stored crc32c {blob.crc32c}, local file has {entry.crc32c}")

    def delete(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            with_retries(lambda: self.blob(name).delete(retry=None, timeout=TIMEOUT), f"delete {self.uri}/{name}",
                         **self.retry)
        except NotFound:
            pass  # gone already: what a delete wants


def open_side(uri: str | os.PathLike, retry: dict | None = None):
    """The side of a sync at uri: a GcsSide (whose calls retry with `retry`) or a LocalSide."""
    uri = os.fspath(uri)
    return GcsSide(uri, retry) if parse_gs(uri) else LocalSide(uri)


def copy_one(src, dst, name: str, listed: Entry, attempts: int = 5, backoff: float = 0.5,
             deadline: float | None = None) -> Entry:
    """Copy one file under the one retry policy; returns the version copied (size, crc32c)."""
    def attempt() -> Entry:
        if isinstance(dst, GcsSide):
            entry = src.entry(name)  # as the file is now: a writer may have finished it since the listing
            dst.send(name, src.path(name), entry)
        else:
            entry = listed
            dst.receive(name, entry, lambda f: src.read_into(name, f))
        return entry

    return with_retries(attempt, f"{src.uri}/{name} -> {dst.uri}/{name}", attempts, backoff, deadline)


# ---------------------------------------------------------------- sync

class _Run:
    """One sync run's state across watch passes: what it has handled and the running totals."""

    def __init__(self, src, dst, workers: int, delete: bool, retry: dict):
        self.src, self.dst, self.workers, self.delete, self.retry = src, dst, workers, delete, retry
        self.done: dict[str, Entry] = {}  # names this run copied or found matching, with the version seen
        self.failing: set[str] = set()  # names whose latest attempt failed (a later watch pass may fix them)
        self.totals = {"uploaded": 0, "bytes": 0, "skipped": 0, "deleted": 0}

    def transfer(self, names: list[str], listing: dict[str, Entry], dst_listing: dict[str, Entry]) -> int:
        """Copy `names` in parallel; returns how many failed."""
        todo = []
        for name in names:
            entry = listing[name]
            if self.done.get(name) == entry:
                continue  # handled in an earlier watch pass
            if dst_listing.get(name) == entry:
                self.totals["skipped"] += 1
                self.done[name] = entry
                self.failing.discard(name)
            else:
                todo.append(name)
        if not todo:
            return 0

        stopping = threading.Event()

        def one(name: str):
            if stopping.is_set():
                return name, None  # not attempted: the sync is stopping
            try:
                return name, copy_one(self.src, self.dst, name, listing[name], **self.retry)
            except NanodataError:
                stopping.set()  # no other file can fare better (a full disk, a hostile name)
                raise
            except Exception as exc:
                return name, exc

        from tqdm import tqdm

        failed = 0
        with ThreadPoolExecutor(max(1, min(self.workers, len(todo)))) as pool:
            for name, outcome in tqdm(pool.map(one, todo), total=len(todo), desc="sync", unit="file",
                                      disable=None, leave=False):  # a stopping error propagates from here
                if isinstance(outcome, Entry):
                    self.done[name] = outcome
                    self.failing.discard(name)
                    self.totals["uploaded"] += 1
                    self.totals["bytes"] += outcome.size
                elif outcome is not None:
                    failed += 1
                    self.failing.add(name)
                    log.error("sync %s: not copied: %s", name, one_line(outcome))
        return failed

    def run_pass(self, listing: dict[str, Entry], final: bool) -> None:
        self.failing &= set(listing)  # a file that failed and then vanished from the source is not owed
        if isinstance(self.src, GcsSide):  # refuse a hostile listing before writing anything
            for name in listing:
                safe_relative_name(name, self.src.uri)
        dst_listing = self.dst.list()
        data = [n for n in listing if n not in (MANIFEST, COMPLETE)]
        failed = self.transfer(data, listing, dst_listing)
        if not final:
            return
        if self.delete:
            for name in sorted(set(dst_listing) - set(listing)):
                self.dst.delete(name)
                self.totals["deleted"] += 1
        if MANIFEST in listing:
            failed += self.transfer([MANIFEST], listing, dst_listing)
        if COMPLETE in listing:
            missing = self._missing_from_manifest()
            self.failing.update(missing)
            if failed or missing:
                log.error("sync: not copying %s: %d transfer(s) failed; named in %s but missing: %s",
                          COMPLETE, failed, MANIFEST, missing[:5])
            else:
                self.transfer([COMPLETE], listing, dst_listing)

    def _missing_from_manifest(self) -> list[str]:
        if MANIFEST not in self.done:
            return []
        try:
            manifest = json.loads(read_bytes(f"{self.dst.uri}/{MANIFEST}") or b"{}")
            named = [s["name"] for s in manifest.get("shards", [])] + ([manifest["val"]["name"]]
                                                                       if manifest.get("val") else [])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("sync: %s is not a nanodata manifest; not checking the files it names", MANIFEST)
            return []
        present = self.dst.list()
        return [n for n in named if n not in present]


def check_sync_args(src, dst, workers, watch, poll_interval, attempts, backoff, deadline) -> None:
    """Every argument of a sync, before any work: one line naming the parameter and its value."""
    src_side, dst_side = open_side(src), open_side(dst)  # malformed gs:// URIs and bucket names
    if isinstance(src_side, GcsSide) and isinstance(dst_side, GcsSide):
        raise NanodataError(f"{src} -> {dst}: one side of a sync must be a local directory")
    if isinstance(src_side, LocalSide) and not src_side.root.is_dir() and (src_side.root.exists() or not watch):
        raise NanodataError(f"{src}: source directory does not exist"
                            + (" (it is a file)" if src_side.root.exists() else ""))
    if isinstance(dst_side, LocalSide) and dst_side.root.exists() and not dst_side.root.is_dir():
        raise NanodataError(f"{dst}: destination is a file, not a directory")
    check_range("--workers", workers, 1)
    check_range("--poll-interval", poll_interval, 0, above=True)
    check_retry_args(attempts, backoff, deadline)


def sync(src: str | os.PathLike, dst: str | os.PathLike, *, workers: int = 8, watch: bool = False,
         delete: bool = False, poll_interval: float = 5.0, attempts: int = 5, backoff: float = 0.5,
         deadline: float | None = None) -> dict:
    """Copy every finished file of SRC to DST (see module doc). `attempts`, `backoff` (first wait, doubling)
    and `deadline` (seconds) set the retry policy per file. Returns the totals:
    {"uploaded", "bytes", "skipped", "failed", "deleted", "failed_names", "passes", "complete", "seconds"}."""
    src, dst = os.fspath(src), os.fspath(dst)
    check_sync_args(src, dst, workers, watch, poll_interval, attempts, backoff, deadline)
    started = time.perf_counter()
    retry = {"attempts": attempts, "backoff": backoff, "deadline": deadline}
    run = _Run(open_side(src, retry), open_side(dst, retry), workers, delete, retry)
    passes = 0
    while True:
        listing = run.src.list()
        complete = COMPLETE in listing
        if complete:
            # the sentinel is written last: one more listing catches files that landed while this one was taken
            listing = run.src.list()
        passes += 1
        run.run_pass(listing, final=complete or not watch)
        if complete or not watch:
            break
        time.sleep(poll_interval)
    totals = dict(run.totals, failed=len(run.failing), failed_names=sorted(run.failing), passes=passes,
                  complete=COMPLETE in run.done, seconds=round(time.perf_counter() - started, 3))
    log.info("sync %s -> %s: %s", src, dst, summary_line(totals))
    return totals


def summary_line(totals: dict) -> str:
    return (f"uploaded {totals['uploaded']} files ({totals['bytes']} bytes), "
            f"skipped {totals['skipped']}, failed {totals['failed']}")


# ---------------------------------------------------------------- small objects (DAGs, markers)

def _split(uri: str | os.PathLike) -> tuple[object, str]:
    uri = os.fspath(uri)
    gs = parse_gs(uri)
    if gs is None:
        return LocalSide(os.path.dirname(uri) or "."), os.path.basename(uri)
    bucket, key = gs
    return GcsSide(f"gs://{bucket}"), key.rstrip("/")


def read_bytes(uri: str | os.PathLike) -> bytes | None:
    """The object's bytes, or None if it does not exist."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        try:
            return side.path(name).read_bytes()
        except FileNotFoundError:
            return None
    from google.api_core.exceptions import NotFound

    try:
        return with_retries(lambda: side.blob(name).download_as_bytes(retry=None, timeout=TIMEOUT), f"read {uri}")
    except NotFound:
        return None


READ_RANGE = 8 * 1024 * 1024  # bytes per ranged GET when streaming an object
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd"}


class _GcsRangeStream(io.RawIOBase):
    """Bytes [start, stop) of one object version, fetched in ranged GETs, each retried.

    The generation is pinned at open: an object replaced mid-read is an error, never a mix of two versions."""

    def __init__(self, uri: str, start: int, stop: int | None):
        from google.api_core.exceptions import NotFound

        side, name = _split(uri)
        self.uri, self.blob = uri, side.blob(name)
        try:
            with_retries(lambda: self.blob.reload(retry=None, timeout=TIMEOUT), f"stat {uri}")
        except NotFound:
            raise NanodataError(f"{uri}: no such object") from None
        self.generation = self.blob.generation
        self.pos, self.stop = start, self.blob.size if stop is None else min(stop, self.blob.size)
        self.buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        if not self.buffer and self.pos < self.stop:
            end = min(self.pos + READ_RANGE, self.stop) - 1
            self.buffer = with_retries(lambda: self.blob.download_as_bytes(
                start=self.pos, end=end, if_generation_match=self.generation, checksum=None, retry=None,
                timeout=TIMEOUT), f"read {self.uri}")
            if not self.buffer:
                raise NanodataError(f"{self.uri}: object ended at byte {self.pos}, expected {self.stop}")
            self.pos += len(self.buffer)
        n = min(len(out), len(self.buffer))
        out[:n] = self.buffer[:n]
        self.buffer = self.buffer[n:]
        return n


def join_uri(base: str, *parts: str) -> str:
    """base/part/...: a gs:// URI or a local path."""
    return "/".join([os.fspath(base).rstrip("/"), *(p.strip("/") for p in parts)])


def open_read(uri: str | os.PathLike, start: int = 0, stop: int | None = None):
    """A buffered binary stream of bytes [start, stop) of a local file or gs:// object (streamed, never whole)."""
    uri = os.fspath(uri)
    if parse_gs(uri) is None:
        try:
            f = open(uri, "rb")
        except (FileNotFoundError, NotADirectoryError):
            raise NanodataError(f"{uri}: input file does not exist") from None
        except IsADirectoryError:
            raise NanodataError(f"{uri}: is a directory, not a file") from None
        except PermissionError:
            raise NanodataError(f"{uri}: permission denied") from None
        f.seek(start)
        if stop is None:
            return f
        return io.BufferedReader(_Window(f, stop - start), COPY_BLOCK)
    return io.BufferedReader(_GcsRangeStream(uri, start, stop), COPY_BLOCK)


class _Window(io.RawIOBase):
    """At most `length` bytes of an open file, from its current position."""

    def __init__(self, f, length: int):
        self.f, self.left = f, length

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        data = self.f.read(min(len(out), self.left))
        self.left -= len(data)
        out[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self.f.close()
        super().close()


def compression_of(uri: str | os.PathLike) -> str | None:
    """'gzip' or 'zstd' from the name's suffix (.gz, .zst), else None."""
    return COMPRESSED_SUFFIXES.get(os.path.splitext(os.fspath(uri))[1].lower())


def open_decompressed(uri: str | os.PathLike):
    """A binary stream of the decompressed content of a (possibly .gz / .zst) local file or gs:// object."""
    raw = open_read(uri)
    kind = compression_of(uri)
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "zstd":
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(raw, closefd=True), COPY_BLOCK)
    return raw


def decompression_errors() -> tuple[type, ...]:
    """What reading a corrupt or truncated .gz / .zst raises."""
    import zlib

    import zstandard

    return OSError, EOFError, zlib.error, zstandard.ZstdError


def content_digest(uri: str | os.PathLike) -> str:
    """A content hash read in a stream: sha256 of a local file; size:crc32c GCS keeps for an object (no download)."""
    uri = os.fspath(uri)
    if parse_gs(uri) is None:
        return file_digest(uri)
    from google.api_core.exceptions import NotFound

    side, name = _split(uri)
    blob = side.blob(name)
    try:
        with_retries(lambda: blob.reload(retry=None, timeout=TIMEOUT), f"stat {uri}")
    except NotFound:
        raise NanodataError(f"{uri}: no such object") from None
    return f"{blob.size}:{blob.crc32c}"


def write_bytes(uri: str | os.PathLike, data: bytes) -> None:
    """Write a small object whole (local: temp file + rename)."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        atomic_write(side.path(name), data)
        return
    with_retries(lambda: side.blob(name).upload_from_string(data, checksum="crc32c", retry=None, timeout=TIMEOUT),
                 f"write {uri}")


def write_file(path: str | os.PathLike, uri: str | os.PathLike) -> None:
    """Copy a local file to a local path (temp + fsync + rename) or a gs:// object (crc32c-checked, retried)."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        with open(path, "rb") as src, atomic_output(side.path(name)) as dst:
            shutil.copyfileobj(src, dst, COPY_BLOCK)
        return
    entry = Entry(os.path.getsize(path), file_digest(path, "crc32c"))
    with_retries(lambda: side.send(name, Path(path), entry), f"upload {uri}")


def local_copy(uri: str | os.PathLike, path: str | os.PathLike) -> Path:
    """A local path holding uri's bytes: uri itself when local, else a crc32c-checked download to `path`."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        if not side.path(name).is_file():
            raise FileNotFoundError(f"{uri}: no such file")
        return side.path(name)
    blob = side.blob(name)
    with_retries(lambda: blob.reload(retry=None, timeout=TIMEOUT), f"stat {uri}")
    path = Path(path)
    with_retries(lambda: LocalSide(path.parent).receive(path.name, Entry(blob.size, blob.crc32c),
                                                        lambda f: side.read_into(name, f)), f"download {uri}")
    return path


def exists(uri: str | os.PathLike) -> bool:
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        return side.path(name).exists()
    return with_retries(lambda: side.blob(name).exists(retry=None, timeout=TIMEOUT), f"stat {uri}")


def list_names(uri_prefix: str | os.PathLike) -> list[str]:
    """Sorted names of every file under a directory or gs:// prefix, relative to it ('a/b.parquet')."""
    uri_prefix = os.fspath(uri_prefix)
    gs = parse_gs(uri_prefix)
    if gs is None:
        root = Path(uri_prefix)
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    bucket, prefix = gs
    return sorted(b.name[len(prefix):] for b in iter_blobs(bucket, prefix, f"list {uri_prefix}"))


# ---------------------------------------------------------------- CLI

def configure_parser(parser) -> None:
    parser.description = ("Copy a corpus directory between local disk and gs://bucket/prefix (either direction). "
                          "Shards first, then manifest.json, then _COMPLETE; files whose size and crc32c already "
                          "match are skipped; downloads are verified and renamed into place. Set "
                          "STORAGE_EMULATOR_HOST to talk to an emulator; otherwise application-default credentials.")
    parser.add_argument("src", metavar="SRC", help="local directory or gs://bucket/prefix")
    parser.add_argument("dst", metavar="DST", help="local directory or gs://bucket/prefix")
    parser.add_argument("--workers", type=int, default=8, help="parallel transfers (default: 8)")
    parser.add_argument("--watch", action="store_true",
                        help="keep syncing new files until the source's _COMPLETE has been copied")
    parser.add_argument("--delete", action="store_true",
                        help="delete destination files that are not in the source (never done otherwise)")
    parser.add_argument("--poll-interval", type=float, default=5.0,
                        help="seconds between listings in --watch mode (default: 5)")
    parser.add_argument("--attempts", type=int, default=5,
                        help="tries per file on 408/429/5xx/dropped connections/corrupt transfers (default: 5)")
    parser.add_argument("--backoff", type=float, default=0.5,
                        help="seconds the first retry waits at most, doubling per retry up to 30, randomized "
                             "(default: 0.5)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds after which a file is no longer retried (default: no limit)")


def run(args) -> int:
    totals = sync(args.src, args.dst, workers=args.workers, watch=args.watch, delete=args.delete,
                  poll_interval=args.poll_interval, attempts=args.attempts, backoff=args.backoff,
                  deadline=args.deadline)
    print(summary_line(totals))
    return 1 if totals["failed"] else 0
