"""Pretraining shards: parquet files with a `text` column, in a local directory or under gs://bucket/prefix.

Which file is validation: a `manifest.json` (written by `nanodata to-parquet`) decides;
else a file named `val*.parquet`; else the nanochat convention, the last file by name.
A gs:// prefix is read in place (nanodata.loader.remote): its objects directly under the prefix are its
files; the functions here return their URIs (str) where a local directory gives Paths.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path, PurePosixPath

import pyarrow.parquet as pq

from nanodata.errors import NanodataError, check_path

MANIFEST = "manifest.json"
COMPLETE = "_COMPLETE"
DEFAULT_DATA_DIR = Path.home() / ".cache" / "nanodata" / "base_data"


def default_data_dir() -> Path:
    return Path(os.environ.get("NANODATA_DATA_DIR", DEFAULT_DATA_DIR))


def corpus_location(data_dir: str | os.PathLike | None = None) -> Path | str:
    """A local directory as a Path; gs://bucket/prefix as the str 'gs://bucket/prefix' (no trailing slash).
    None: $NANODATA_DATA_DIR (which may be gs:// too), else ~/.cache/nanodata/base_data."""
    from nanodata.storage import parse_gs

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
        from nanodata.loader.remote import Bucket

        return [in_dir(location, name) for name in sorted(Bucket(location).list()) if name.endswith(".parquet")]
    if not location.is_dir():
        raise NanodataError(f"data dir {location} does not exist")
    return sorted(p for p in location.iterdir() if p.suffix == ".parquet" and p.is_file())


def read_manifest(data_dir: str | os.PathLike) -> dict | None:
    location = corpus_location(data_dir)
    path = in_dir(location, MANIFEST)
    if isinstance(location, str):
        from nanodata.storage import read_bytes

        text = read_bytes(path)
    else:
        text = path.read_bytes() if path.is_file() else None
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise NanodataError(f"{path}: invalid JSON ({exc})") from None


def split_names(names: list[str], manifest: dict | None, where, *, explicit_val: bool = False
                ) -> tuple[list[str], list[str]]:
    """The train/val rule over the sorted parquet file names of one directory: (train names, val names).
    explicit_val: val only from the manifest or val*.parquet, never the last file (a corpus still growing)."""
    if manifest is not None:
        train, val = _manifest_entries(where, manifest)
        return sorted(entry["name"] for entry in train), [entry["name"] for entry in val]
    val = [name for name in names if name.startswith("val")]
    if val or explicit_val:
        return [name for name in names if name not in val], val
    return names[:-1], names[-1:]


def split_files(data_dir: str | os.PathLike | None = None) -> tuple[list[Path], list[Path]]:
    """(train files, val files), each sorted by name (URIs for a gs:// prefix)."""
    location = corpus_location(data_dir)
    names = [PurePosixPath(path).name for path in list_parquet_files(location)]
    train, val = split_names(names, read_manifest(location), location)
    return [in_dir(location, name) for name in train], [in_dir(location, name) for name in val]


def _manifest_entries(data_dir: Path | str, manifest) -> tuple[list[dict], list[dict]]:
    """A manifest's (train, val) file entries, each a dict with a str name."""
    try:
        train, val = list(manifest["shards"]), [manifest["val"]] if manifest.get("val") else []
        if all(isinstance(entry["name"], str) for entry in train + val):
            return train, val
        problem = "a name that is not a string"
    except (KeyError, TypeError, AttributeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    raise NanodataError(f"{in_dir(data_dir, MANIFEST)}: malformed, expected shards[].name and val.name ({problem})")


def manifest_checksums(data_dir: Path | str) -> dict[str, str]:
    """{file name: crc32c} of the files a manifest.json lists with a checksum; empty without a manifest."""
    manifest = read_manifest(data_dir)
    if manifest is None:
        return {}
    train, val = _manifest_entries(data_dir, manifest)
    return {entry["name"]: entry["crc32c"] for entry in train + val if isinstance(entry.get("crc32c"), str)}


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
        from nanodata.loader.remote import open_object

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
        from nanodata.loader.remote import open_object

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
