"""Pretraining shards on local disk: parquet files with a `text` column.

Which file is validation: a `manifest.json` (written by `nanodata to-parquet`) decides;
else a file named `val*.parquet`; else the nanochat convention, the last file by name.
"""

from __future__ import annotations

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
        try:
            train = sorted(data_dir / s["name"] for s in manifest["shards"])
            val = [data_dir / manifest["val"]["name"]] if manifest.get("val") else []
        except (KeyError, TypeError) as exc:
            raise NanodataError(f"{data_dir / MANIFEST}: malformed, expected shards[].name and val.name "
                                f"({type(exc).__name__}: {exc})") from None
        return train, val
    val = [p for p in files if p.name.startswith("val")]
    if val:
        return [p for p in files if p not in val], val
    return files[:-1], files[-1:]


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
