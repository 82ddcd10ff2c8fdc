"""The two kinds of place a file lives: a local directory (LocalSide) and a gs:// prefix (GcsSide).

Both list their finished files with size and crc32c (Entry), read a file into a stream and take one in:
a local file lands under a temp name and is renamed only once its crc32c matches; an upload is checked
against the crc32c GCS computed of what it stored.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage.files import COMPLETE, file_digest
from nanodata.storage.gcs import RESUMABLE_CHUNK, RESUMABLE_THRESHOLD, TIMEOUT, gcs_client, list_blobs, parse_gs
from nanodata.storage.retry import CorruptTransfer, land, with_retries

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
        listing = [(b.name, b.size, b.crc32c) for b in list_blobs(self.uri, **self.retry)]
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
