"""One I/O layer for URIs: a local path or gs://bucket/prefix, read, written, listed and checked the same way.

Small objects (markers, JSON, manifests) are read and written whole; large inputs are streamed
(`open_read`, `open_decompressed`); local writes go through nanodata.storage.files (temp, fsync, rename).
Whole corpus directories travel through nanodata.corpus.dirsync.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage.files import atomic_output, atomic_write, file_digest, object_digest
from nanodata.storage.gcs import TIMEOUT, Bucket, iter_blobs, parse_gs, read_object
from nanodata.storage.retry import with_retries
from nanodata.storage.sides import COPY_BLOCK, Entry, GcsSide, LocalSide


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def check_uri(name: str, uri) -> str:
    """A run's URI argument (a DAG Param), or a one-line NanodataError saying in words what it must be:
    an absolute local path or gs://bucket/prefix with a valid bucket name."""
    if not isinstance(uri, str) or not uri.strip():
        raise NanodataError(f"{name}: empty; give an absolute path or gs://bucket/prefix")
    try:
        local = parse_gs(uri) is None  # checks the bucket name of a gs:// URI
    except NanodataError as exc:
        raise NanodataError(f"{name}: {exc}") from None
    if local and not uri.startswith("/"):
        raise NanodataError(f"{name} {uri!r}: not an absolute path or gs://bucket/prefix")
    return uri


def read_json(uri: str) -> dict | None:
    data = read_bytes(uri)
    return None if data is None else json.loads(data)


IO_THREADS = 16  # requests one task has in flight for many small objects: each is a round trip, not bandwidth


def in_order(work, items, window: int):
    """work(item) for each item, streamed in order: up to `window` at once on threads, the items taken from their
    iterable in this thread, at most `window` results held (done or not) before they are taken; the first error
    raised when its turn comes (the work not started by then is dropped)."""
    with ThreadPoolExecutor(window) as pool:
        pending: deque = deque()
        try:
            for item in items:
                pending.append(pool.submit(work, item))
                if len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            pool.shutdown(cancel_futures=True)


def _concurrently(work, items) -> list:
    """work(item) for each item, IO_THREADS at a time; the results in order, the first error raised."""
    return list(in_order(work, items, IO_THREADS))


def read_jsons(uris) -> list[dict | None]:
    """read_json of each URI, in order, several at a time: the summaries of a build's many tasks."""
    return _concurrently(read_json, uris)


def write_json(uri: str, obj) -> None:
    write_bytes(uri, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


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


def read_unchecked(uri: str | os.PathLike) -> bytes | None:
    """read_bytes without the transfer's checksum, for a small object whose reader checks it itself (an entry under
    a MAC): a gs:// object in one light GET (gcs.read_object). Safe to call from several threads at once."""
    gs = parse_gs(os.fspath(uri))
    if gs is None:  # (read_bytes's, without its side nor a buffer: many small entries are read in a row)
        try:
            with open(uri, "rb", buffering=0) as f:
                return f.read()
        except FileNotFoundError:
            return None
    bucket, name = gs
    return read_object(bucket, name.rstrip("/"))


READ_RANGE = 8 * 1024 * 1024  # bytes per ranged GET when streaming an object
COMPRESSED_SUFFIXES = {".gz": "gzip", ".zst": "zstd"}


class _GcsRangeStream(io.RawIOBase):
    """Bytes [start, stop) of one object version, fetched in ranged GETs through the one object reader (Bucket).

    The version is pinned at open: an object replaced mid-read is an error, never a mix of two versions."""

    def __init__(self, uri: str, start: int, stop: int | None):
        directory, _, self.name = uri.rpartition("/")
        self.uri, self.bucket = uri, Bucket(directory)
        self.info = self.bucket.stat(self.name)
        if self.info is None:
            raise NanodataError(f"{uri}: no such object")
        self.pos, self.stop = start, self.info.size if stop is None else min(stop, self.info.size)
        self.buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, out) -> int:
        if not self.buffer and self.pos < self.stop:
            self.buffer = self.bucket.read(self.name, self.info, self.pos, min(self.pos + READ_RANGE, self.stop))
            self.pos += len(self.buffer)
        n = min(len(out), len(self.buffer))
        out[:n] = self.buffer[:n]
        self.buffer = self.buffer[n:]
        return n


class _GcsSeekable(_GcsRangeStream):
    """A whole object version as a seekable stream (for readers that seek, such as a gzip seek index)."""

    def __init__(self, uri: str):
        super().__init__(uri, 0, None)

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos - len(self.buffer), io.SEEK_END: self.stop}[whence]
        self.pos, self.buffer = max(0, base + offset), b""
        return self.pos

    def tell(self) -> int:
        return self.pos - len(self.buffer)


def open_seekable(uri: str | os.PathLike):
    """A seekable binary stream of a local file or one gs:// object version (ranged GETs)."""
    uri = os.fspath(uri)
    if parse_gs(uri) is None:
        return open_read(uri)
    return io.BufferedReader(_GcsSeekable(uri), READ_RANGE)


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
        return f if stop is None else open_window(f, stop - start)
    return io.BufferedReader(_GcsRangeStream(uri, start, stop), COPY_BLOCK)


def open_window(f, length: int):
    """A buffered stream of the next `length` bytes of an open binary stream `f` (closing it closes f)."""
    return io.BufferedReader(_Window(f, length), COPY_BLOCK)


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
    return object_digest(blob.size, blob.crc32c)


def write_bytes(uri: str | os.PathLike, data: bytes, durable: bool = True) -> None:
    """Write a small object whole (local: temp file + rename; durable=False: no fsync, see files.atomic_output)."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        atomic_write(side.path(name), data, durable)
        return
    with_retries(lambda: side.blob(name).upload_from_string(data, checksum="crc32c", retry=None, timeout=TIMEOUT),
                 f"write {uri}")


def write_file(path: str | os.PathLike, uri: str | os.PathLike, durable: bool = True) -> None:
    """Copy a local file to a local path (temp + fsync + rename; durable=False: no fsync, see files.atomic_output) or
    a gs:// object (crc32c-checked, retried)."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        with open(path, "rb") as src, atomic_output(side.path(name), durable=durable) as dst:
            shutil.copyfileobj(src, dst, COPY_BLOCK)
        return
    entry = Entry(os.path.getsize(path), file_digest(path, "crc32c"))
    with_retries(lambda: side.send(name, Path(path), entry), f"upload {uri}")


def local_copy(uri: str | os.PathLike, path: str | os.PathLike) -> Path:
    """A local path holding uri's bytes: uri itself when local, else a crc32c-checked download to `path`;
    FileNotFoundError when there is no such file or object."""
    side, name = _split(uri)
    if isinstance(side, LocalSide):
        if not side.path(name).is_file():
            raise FileNotFoundError(f"{uri}: no such file")
        return side.path(name)
    from google.api_core.exceptions import NotFound

    blob = side.blob(name)
    try:
        with_retries(lambda: blob.reload(retry=None, timeout=TIMEOUT), f"stat {uri}")
    except NotFound:
        raise FileNotFoundError(f"{uri}: no such object") from None
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


def iter_sizes(uri_prefix: str | os.PathLike):
    """(name relative to the prefix, bytes) of every file under a directory or gs:// prefix, streamed (a listing
    of millions of files is never held; local order is the walk's, GCS's is by name)."""
    for name, size, _ in iter_stats(uri_prefix):
        yield name, size


def iter_stats(uri_prefix: str | os.PathLike):
    """iter_sizes with each file's last change: (name, bytes, seconds since the epoch), a local file's mtime or an
    object's `updated` time (the listing carries it: no request per object)."""
    uri_prefix = os.fspath(uri_prefix)
    gs = parse_gs(uri_prefix.rstrip("/") + "/")
    if gs is None:
        for directory, _, files in os.walk(uri_prefix):
            rel = os.path.relpath(directory, uri_prefix)
            for name in files:
                with contextlib.suppress(FileNotFoundError):  # removed while listed: not there
                    stat = os.stat(os.path.join(directory, name))
                    yield (name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"), stat.st_size,
                           stat.st_mtime)
        return
    bucket, prefix = gs
    for blob in iter_blobs(bucket, prefix, f"list {uri_prefix}"):
        yield blob.name[len(prefix):], int(blob.size), (blob.updated or blob.time_created).timestamp()


def delete_files(uris) -> int:
    """Remove each file or object (several requests at a time for gs://); a gone one is no error. Returns how many
    were asked for."""
    uris = [os.fspath(u) for u in uris]

    def delete(uri: str) -> None:
        gs = parse_gs(uri)
        if gs is None:
            Path(uri).unlink(missing_ok=True)
            return
        from nanodata.storage.gcs import gcs_client  # one client per thread: a shared one's pool overflows

        bucket, name = gs[0], gs[1].rstrip("/")
        with_retries(lambda: _delete_blob(gcs_client().bucket(bucket).blob(name)), f"delete {uri}")

    _concurrently(delete, uris)
    return len(uris)


def delete_tree(uri_prefix: str | os.PathLike) -> int:
    """Remove a directory or every object under a gs:// prefix; returns how many files went. Absent: 0."""
    uri_prefix = os.fspath(uri_prefix)
    gs = parse_gs(uri_prefix.rstrip("/") + "/")
    if gs is None:
        root = Path(uri_prefix)
        if not root.exists():
            return 0
        count = sum(1 for p in root.rglob("*") if p.is_file())
        shutil.rmtree(root)
        return count
    bucket, prefix = gs
    # one request per object (the emulator serves no batch requests), several at a time; a gone object is no error
    return delete_files([f"gs://{bucket}/{b.name}" for b in iter_blobs(bucket, prefix, f"list {uri_prefix}")])


def _delete_blob(blob) -> None:
    from google.api_core.exceptions import NotFound

    try:
        blob.delete(retry=None, timeout=TIMEOUT)
    except NotFound:
        pass
