"""Pretraining shards on local disk: parquet files with a `text` column.

Which file is validation: a `manifest.json` (written by `nanodata to-parquet`) decides;
else a file named `val*.parquet`; else the nanochat convention, the last file by name.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from nanodata.errors import NanodataError

MANIFEST = "manifest.json"
COMPLETE = "_COMPLETE"
DEFAULT_DATA_DIR = Path.home() / ".cache" / "nanodata" / "base_data"


def default_data_dir() -> Path:
    return Path(os.environ.get("NANODATA_DATA_DIR", DEFAULT_DATA_DIR))


def list_parquet_files(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """All finished parquet files, sorted by name (partials end in .tmp and are never listed)."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if not data_dir.is_dir():
        raise NanodataError(f"data dir {data_dir} does not exist")
    return sorted(p for p in data_dir.iterdir() if p.suffix == ".parquet" and p.is_file())


def read_manifest(data_dir: str | os.PathLike) -> dict | None:
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise NanodataError(f"{path}: invalid JSON ({exc})") from None


def split_files(data_dir: str | os.PathLike | None = None) -> tuple[list[Path], list[Path]]:
    """(train files, val files), each sorted by name."""
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    files = list_parquet_files(data_dir)
    manifest = read_manifest(data_dir)
    if manifest is not None:
        train, val = _manifest_entries(data_dir, manifest)
        return sorted(data_dir / entry["name"] for entry in train), [data_dir / entry["name"] for entry in val]
    val = [p for p in files if p.name.startswith("val")]
    if val:
        return [p for p in files if p not in val], val
    return files[:-1], files[-1:]


def _manifest_entries(data_dir: Path, manifest) -> tuple[list[dict], list[dict]]:
    """A manifest's (train, val) file entries, each a dict with a str name."""
    try:
        train, val = list(manifest["shards"]), [manifest["val"]] if manifest.get("val") else []
        if all(isinstance(entry["name"], str) for entry in train + val):
            return train, val
        problem = "a name that is not a string"
    except (KeyError, TypeError, AttributeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    raise NanodataError(f"{data_dir / MANIFEST}: malformed, expected shards[].name and val.name ({problem})")


def manifest_checksums(data_dir: Path) -> dict[str, str]:
    """{file name: crc32c} of the files a manifest.json lists with a checksum; empty without a manifest."""
    manifest = read_manifest(data_dir)
    if manifest is None:
        return {}
    train, val = _manifest_entries(data_dir, manifest)
    return {entry["name"]: entry["crc32c"] for entry in train + val if isinstance(entry.get("crc32c"), str)}


def parquet_fingerprint(path: Path) -> tuple[int, str]:
    """(size in bytes, digest of the parquet footer): cheap to take, and it changes when a file is rewritten,
    since the footer records every row group's row count, byte sizes and min/max values."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 8, 0))
            tail = f.read(8)
            footer_size = int.from_bytes(tail[:4], "little")
            if len(tail) < 8 or tail[4:] != b"PAR1" or footer_size > size - 12:
                raise NanodataError(f"{path}: not a readable parquet file (no parquet footer)")
            f.seek(size - 8 - footer_size)
            footer = f.read(footer_size)
    except OSError as exc:
        raise NanodataError(f"{path}: unreadable ({exc.strerror})") from None
    return size, hashlib.sha256(footer).hexdigest()[:16]


def files_for_split(split: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    if split not in ("train", "val"):
        raise NanodataError(f"split must be 'train' or 'val', not {split!r}")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    train, val = split_files(data_dir)
    files = train if split == "train" else val
    if not files:
        n = len(list_parquet_files(data_dir))
        if n == 0:
            raise NanodataError(f"{data_dir}: no .parquet files")
        raise NanodataError(f"{data_dir}: no {split} files ({n} parquet file(s) found; "
                            f"without a manifest or val*.parquet the last file is val, so train needs at least 2)")
    return files


def open_parquet(path: Path) -> pq.ParquetFile:
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
