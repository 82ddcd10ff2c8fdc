"""Pretraining shards: parquet files with a `text` column, in a local directory or under gs://bucket/prefix.

Which file is validation: nanodata.corpus.layout's rule (the manifest, else `val*.parquet`, else the last file).
A gs:// prefix is read in place (RemoteParquet here; the loader adds read-ahead and a cache): its objects directly under the prefix are its
files; the functions here return their URIs (str) where a local directory gives Paths.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from nanodata.corpus.layout import MANIFEST, Manifest, is_parquet_name, split_names
from nanodata.errors import NanodataError, check_path
from nanodata.storage.gcs import Bucket, ObjectInfo, parse_gs
from nanodata.storage.uri import read_bytes

DEFAULT_DATA_DIR = Path.home() / ".cache" / "nanodata" / "base_data"


def default_data_dir() -> Path:
    return Path(os.environ.get("NANODATA_DATA_DIR", DEFAULT_DATA_DIR))


def corpus_location(data_dir: str | os.PathLike | None = None) -> Path | str:
    """A local directory as a Path; gs://bucket/prefix as the str 'gs://bucket/prefix' (no trailing slash).
    None: $NANODATA_DATA_DIR (which may be gs:// too), else ~/.cache/nanodata/base_data."""
    check_path("data_dir", data_dir, allow_none=True)
    data_dir = os.fspath(data_dir if data_dir is not None else os.environ.get("NANODATA_DATA_DIR", DEFAULT_DATA_DIR))
    gs = parse_gs(data_dir)
    if gs is None:
        return Path(data_dir)
    bucket, prefix = gs
    return f"gs://{bucket}/{prefix}".rstrip("/")


def in_dir(location: Path | str, name: str) -> Path | str:
    """The file `name` of a corpus location (a Path, or a gs:// URI)."""
    return location / name if isinstance(location, Path) else f"{location}/{name}"


def list_parquet_files(data_dir: str | os.PathLike | None = None) -> list[Path] | list[str]:
    """All finished parquet files, sorted by name (partials end in .tmp and are never listed)."""
    location = corpus_location(data_dir)
    if isinstance(location, str):
        return [in_dir(location, name) for name in sorted(Bucket(location).list()) if is_parquet_name(name)]
    if not location.is_dir():
        raise NanodataError(f"data dir {location} does not exist")
    return sorted(p for p in location.iterdir() if is_parquet_name(p.name) and p.is_file())


def read_manifest(data_dir: str | os.PathLike) -> Manifest | None:
    """The corpus's manifest.json, checked (nanodata.corpus.layout), or None when it has none."""
    location = corpus_location(data_dir)
    path = in_dir(location, MANIFEST)
    if isinstance(location, str):
        data = read_bytes(path)
    else:
        data = path.read_bytes() if path.is_file() else None
    return None if data is None else Manifest.from_bytes(data, str(path))


def split_files(data_dir: str | os.PathLike | None = None) -> tuple[list[Path], list[Path]]:
    """(train files, val files), each sorted by name (URIs for a gs:// prefix)."""
    location = corpus_location(data_dir)
    names = [PurePosixPath(path).name for path in list_parquet_files(location)]
    train, val = split_names(names, read_manifest(location))
    return [in_dir(location, name) for name in train], [in_dir(location, name) for name in val]


def manifest_checksums(data_dir: Path | str) -> dict[str, str]:
    """{file name: crc32c} of the files a manifest.json lists with a checksum; empty without a manifest."""
    manifest = read_manifest(data_dir)
    return {} if manifest is None else manifest.checksums()


FOOTER_GUESS = 64 * 1024  # bytes read from a file's end to find its footer: one read for nearly every file


def read_tail(read, size: int, where) -> tuple[int, bytes]:
    """(start, bytes [start, size)) of a parquet file holding its whole footer, by one or two reads;
    read(start, stop) gives bytes [start, stop). Not parquet: a NanodataError naming `where`."""
    start = max(size - FOOTER_GUESS, 0)
    tail = read(start, size)
    footer_size = int.from_bytes(tail[-8:-4], "little")
    if size < 12 or len(tail) != size - start or tail[-4:] != b"PAR1" or footer_size > size - 12:
        raise NanodataError(f"{where}: not a readable parquet file (no parquet footer)")
    footer_start = size - 8 - footer_size
    if footer_start < start:
        tail, start = read(footer_start, start) + tail, footer_start
    return start, tail


def footer_digest(tail: bytes) -> str:
    """Digest of the parquet footer at the end of `tail` (as read_tail returns it)."""
    footer_size = int.from_bytes(tail[-8:-4], "little")
    return hashlib.sha256(tail[len(tail) - 8 - footer_size:-8]).hexdigest()[:16]


def parquet_fingerprint(path: Path | str) -> tuple[int, str]:
    """(size in bytes, digest of the parquet footer): cheap to take, and it changes when a file is rewritten,
    since the footer records every row group's row count, byte sizes and min/max values."""
    if isinstance(path, str) and path.startswith("gs://"):
        obj = open_object(path)
        return obj.info.size, footer_digest(obj.tail)
    try:
        with open(path, "rb") as f:
            def read(start: int, stop: int) -> bytes:
                f.seek(start)
                return f.read(stop - start)

            size = f.seek(0, os.SEEK_END)
            _, tail = read_tail(read, size, path)
    except OSError as exc:
        raise NanodataError(f"{path}: unreadable ({exc.strerror})") from None
    return size, footer_digest(tail)


def files_for_split(split: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    if split not in ("train", "val"):
        raise NanodataError(f"split must be 'train' or 'val', not {split!r}")
    data_dir = corpus_location(data_dir)
    train, val = split_files(data_dir)
    files = train if split == "train" else val
    if not files:
        n = len(list_parquet_files(data_dir))
        if n == 0:
            raise NanodataError(f"{data_dir}: no .parquet files")
        raise NanodataError(f"{data_dir}: no {split} files ({n} parquet file(s) found; "
                            f"without a manifest or val*.parquet the last file is val, so train needs at least 2)")
    return files


def open_parquet(path: Path | str) -> pq.ParquetFile:
    if isinstance(path, str) and path.startswith("gs://"):
        return open_object(path).parquet_file()
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for corrupt or truncated files
        raise NanodataError(f"{path}: not a readable parquet file ({exc})") from None


def read_texts(pf: pq.ParquetFile, path: Path, rg_idx: int, use_threads: bool = True) -> list[str]:
    """The `text` column of one row group, checked: every value must be a string.

    use_threads=False for callers that are already one of several worker processes: pyarrow's
    thread pool then only adds contention."""
    if "text" not in pf.schema_arrow.names:
        raise NanodataError(f"{path}: no 'text' column (columns: {pf.schema_arrow.names})")
    try:
        texts = pf.read_row_group(rg_idx, columns=["text"], use_threads=use_threads).column("text").to_pylist()
    except Exception as exc:
        raise NanodataError(f"{path} row group {rg_idx}: unreadable ({exc})") from None
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise NanodataError(f"{path} row group {rg_idx} row {row}: text is {type(text).__name__}, not str")
    return texts


def parquets_iter_batched(split: str, start: int = 0, step: int = 1, data_dir: str | os.PathLike | None = None):
    """Yield the texts of one row group at a time; row groups start, start+step, ... of each file (DDP)."""
    for path in files_for_split(split, data_dir):
        pf = open_parquet(path)
        for rg_idx in range(start, pf.num_row_groups, step):
            yield read_texts(pf, path, rg_idx)


# -- parquet objects in a bucket, read by ranges ---------------------------------------------------------------
class RemoteParquet:
    """An opened parquet object: its pinned version, footer and the byte range of each row group's text."""

    def __init__(self, bucket: Bucket, name: str, info: ObjectInfo):
        self.bucket, self.name, self.info = bucket, name, info
        self.label = bucket.label(name)
        self.tail_start, self.tail = read_tail(lambda a, b: bucket.read(name, info, a, b), info.size, self.label)
        try:
            self.metadata = pq.read_metadata(pa.BufferReader(self.tail))
        except Exception as exc:  # pyarrow raises ArrowInvalid/OSError for a corrupt footer
            raise NanodataError(f"{self.label}: not a readable parquet file ({exc})") from None
        self.num_row_groups = self.metadata.num_row_groups
        self._text = next((j for j in range(self.metadata.num_columns)
                           if self.metadata.schema.column(j).path == "text"), None)

    def chunk(self, rg_idx: int) -> tuple[int, int]:
        """Bytes [start, stop) of row group rg_idx's text column; (0, 0) without one (read_texts names it)."""
        if self._text is None:
            return 0, 0
        column = self.metadata.row_group(rg_idx).column(self._text)
        offsets = [column.data_page_offset, *([column.dictionary_page_offset] if column.has_dictionary_page else [])]
        start = min(offset for offset in offsets if offset > 0)
        return start, start + column.total_compressed_size

    def parquet_file(self, pieces: dict[int, bytes] | None = None, stop: threading.Event | None = None) -> pq.ParquetFile:
        """A ParquetFile reading the pieces {start: bytes} already fetched, the tail, else ranged GETs; once `stop`
        is set its reads fail at once (pyarrow then returns an error instead of waiting on the network)."""
        pieces = {**(pieces or {}), self.tail_start: self.tail}
        reader = _PiecesFile(self.info.size, pieces, lambda a, b: self.bucket.read(self.name, self.info, a, b), stop)
        return pq.ParquetFile(pa.PythonFile(reader, mode="r"), metadata=self.metadata)


def open_object(uri: str) -> RemoteParquet:
    """A gs:// parquet object opened at its current version (nanodata.dataset's gs:// paths)."""
    directory, _, name = uri.rpartition("/")
    bucket = Bucket(directory)
    info = bucket.stat(name)
    if info is None:
        raise NanodataError(f"{uri}: no such object")
    return RemoteParquet(bucket, name, info)


class _PiecesFile(io.RawIOBase):
    """A random-access file of `size` bytes made of fetched pieces; a read no piece covers is fetched."""

    def __init__(self, size: int, pieces: dict[int, bytes], fetch, stop: threading.Event | None = None):
        self.size, self.pieces, self.fetch, self.pos = size, pieces, fetch, 0
        self.stop = stop or threading.Event()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = (offset, self.pos + offset, self.size + offset)[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, out) -> int:
        if self.stop.is_set() or self.closed:  # closed from outside: the reader is shutting down
            raise OSError("nanodata reader closed: read refused")
        n = max(0, min(len(out), self.size - self.pos))
        stop = self.pos + n
        data = next((piece[self.pos - start:stop - start] for start, piece in self.pieces.items()
                     if start <= self.pos and stop <= start + len(piece)), None)
        if data is None:
            data = self.fetch(self.pos, stop)
        out[:n] = data
        self.pos = stop
        return n
