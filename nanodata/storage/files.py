"""Local file primitives every writer shares: whole-or-nothing writes, streamed digests, a plain disk-full error.

A file that must never be seen half-written goes through `atomic_output` (or `atomic_write` for bytes in
hand, `commit` for a temp file another library wrote): the bytes land in `NAME.tmp` in the same directory,
are fsynced, renamed over NAME, and the directory is fsynced so the rename itself survives a power cut.
A failed write removes its temp file; NAME keeps its old bytes or stays absent.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import os
import re
import sqlite3
import tempfile
from pathlib import Path

import google_crc32c

from nanodata.errors import NanodataError
from nanodata.ranges import not_local

BLOCK = 1 << 20
COMPLETE = "_COMPLETE"  # a directory's commit marker: written last, so its presence means every file is whole
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def temp_name(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".tmp")


def own_temp_name(path: str | os.PathLike) -> Path:
    """A temp name no other writer of `path` uses (its process and a random part): for files several processes
    may write at the same moment, with equal bytes, where the last rename wins."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp")


def fsync_dir(directory: str | os.PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Make a finished temp file the file `path`: fsync it, rename it over path, fsync the directory. A temp
    directory (of files each written whole) is fsynced and renamed the same way, over an absent or empty one."""
    commit_together((tmp, path))


def commit_together(*pairs: tuple[str | os.PathLike, str | os.PathLike]) -> None:
    """commit() of several finished temp files (tmp, path) at once, for a file and the marker that says it is
    complete: every temp is fsynced first, then they are renamed in the order given, back to back, then their
    directories are fsynced. A kill or a reader finds the first without the last only between two renames,
    never across the fsyncs' milliseconds."""
    for tmp, path in pairs:
        with disk_errors(path):
            if Path(tmp).is_dir():
                fsync_dir(tmp)
            else:
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
    for tmp, path in pairs:
        with disk_errors(path):
            os.replace(tmp, path)
    for directory in dict.fromkeys(Path(path).parent for _, path in pairs):
        with disk_errors(directory):
            fsync_dir(directory)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "wb", *, shared: bool = False, durable: bool = True,
                  **open_args):
    """`with atomic_output(p) as f: f.write(...)`: p appears whole when the block ends, or not at all.
    shared: processes may write p at the same moment (equal bytes, e.g. a content-addressed entry), so each
    writes its own temp name and the last rename wins. durable=False: no fsync of the file or its directory, for
    a file whose loss or tearing by a power cut its readers detect and survive (a cache entry under a MAC: a
    miss); no reader ever sees it half written, since it still appears by rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = own_temp_name(path) if shared else temp_name(path)
    try:
        with disk_errors(path):
            with open(tmp, mode, **open_args) as f:
                yield f
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
            if durable:
                fsync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, data: bytes | str, durable: bool = True) -> None:
    with atomic_output(path, "wb", durable=durable) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def is_disk_full(exc: BaseException) -> bool:
    # numpy's tofile (np.save to a real file) reports a short fwrite as "N requested and M written", no errno
    if isinstance(exc, sqlite3.OperationalError):  # SQLite reports ENOSPC as SQLITE_FULL
        return "disk is full" in str(exc)
    if not isinstance(exc, OSError):
        return False
    return exc.errno in FULL or exc.errno is None and SHORT_WRITE.search(str(exc)) is not None


def disk_full_error(path: str | os.PathLike) -> NanodataError:
    return NanodataError(f"{path}: cannot write: no space left on the device; free space and re-run "
                         f"(finished files are kept, nothing partial is left)")


@contextlib.contextmanager
def disk_errors(path: str | os.PathLike):
    """Turn 'no space left' (ENOSPC, quota, file too large) while writing `path` into one plain line."""
    try:
        yield
    except OSError as exc:
        if is_disk_full(exc):
            raise disk_full_error(path) from None
        raise


def _digester(algorithm: str):
    """(update, finish) of a digest: hex for hashlib algorithms, base64 for 'crc32c' (as GCS reports it)."""
    if algorithm == "crc32c":
        checksum = google_crc32c.Checksum()
        return checksum.update, lambda: base64.b64encode(checksum.digest()).decode()
    h = hashlib.new(algorithm)
    return h.update, h.hexdigest


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Streamed digest of a local file (see _digester for its form)."""
    update, finish = _digester(algorithm)
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            update(block)
    return finish()


def data_digest(data: bytes, algorithm: str = "sha256") -> str:
    """file_digest of bytes in hand."""
    update, finish = _digester(algorithm)
    update(data)
    return finish()


def object_digest(size: int, crc32c: str) -> str:
    """The content digest of a gs:// object (storage.content_digest's form): its size and GCS's base64 crc32c."""
    return f"{size}:{crc32c}"


def content_hash(data: bytes | memoryview) -> bytes:
    """The 16-byte digest of bytes in hand (blake2b): docs' dedupe key, cache keys and entries' checksums."""
    return hashlib.blake2b(data, digest_size=16).digest()


def crc32c_name(data: bytes) -> str:
    """The crc32c of bytes in hand as 8 hex digits, for file names (base64, GCS's form, may hold '/')."""
    return f"{google_crc32c.value(data):08x}"


def check_output_dir(path: str | os.PathLike, option: str) -> None:
    """Before any work: `path` is a local directory, or one can be made there (no file in the way, writable: tried
    with a directory made and removed at once, since root passes any permission check and a read-only mount, /proc
    or /sys pass os.access). Nothing is left behind."""
    problem = not_local(path, "directory")
    if problem is not None:
        raise NanodataError(f"{option} {problem}")
    path = Path(path)
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        where = "exists and" if existing == path else f"{existing}"
        raise NanodataError(f"{option} {path}: {where} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise NanodataError(f"{option} {path}: {existing} is not writable")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".probe-", dir=existing))
    except OSError as exc:
        raise NanodataError(f"{option} {path}: cannot create a directory in {existing} ({exc.strerror})") from None
