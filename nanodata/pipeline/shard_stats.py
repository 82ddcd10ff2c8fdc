"""What a build report counts in one parquet shard, as a small JSON-able dict.

A report is a merge of these (nanodata.report.figures): `nanodata report` computes them by reading
every shard; the corpus DAG's mapped shard tasks compute them for the files they write and keep them in their
summaries, so the report step reads no doc. Either way the same function counts, so the report is the same.

{"name", "split", "rows", "bytes", "tokens", "counted": tokens counted with a tokenizer (the shard has no complete
n_tokens column), "groups": {"mode" | "kind" | "project": {value: docs}, "<group>_tokens": {value: tokens}},
"lengths": every doc's tokens in row order (base64 of little-endian uint32: the histogram, percentiles and the
crop replay need them)}.
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nanodata.dataset import open_parquet, read_texts
from nanodata.errors import NanodataError

NOT_RECORDED = "(not recorded)"  # docs without the chunker's metadata column (or the shard has no such column)
GROUPS = (("mode", "mode"), ("kind", "kind"), ("project", "source"))  # (group, the column it comes from)


def _stored_lengths(pf, path: Path) -> np.ndarray | None:
    """The shard's n_tokens column; None without one, or when it has nulls (docs the chunker did not count)."""
    if "n_tokens" not in pf.schema_arrow.names:
        return None
    col = pf.read(columns=["n_tokens"]).column("n_tokens")
    if not pa.types.is_integer(col.type):
        raise NanodataError(f"{path}: column n_tokens must be integers (is {col.type})")
    return None if col.null_count else col.to_numpy().astype(np.int64)


def _counted_lengths(pf, path: Path, encoding) -> np.ndarray:
    return np.array([len(ids) for rg in range(pf.num_row_groups)
                     for ids in encoding.encode_ordinary_batch(read_texts(pf, path, rg))], dtype=np.int64)


def _shard_groups(pf, lengths: np.ndarray) -> dict[str, dict]:
    """{"mode" | "kind" | "project": {value: docs}, plus "<group>_tokens": {value: tokens}} of one shard. A doc's
    project is its `source` up to the first '/' or ':' ('repo/path', 'input.jsonl:LINE')."""
    present = [column for _, column in GROUPS if column in pf.schema_arrow.names]
    table = pf.read(columns=present)
    out = {}
    for group, column in GROUPS:
        if column in present:
            keys = pc.cast(table.column(column), pa.string())
            if column == "source":
                keys = pc.replace_substring_regex(keys, pattern="[/:].*", replacement="")
            keys = pc.fill_null(keys, NOT_RECORDED)
        else:
            keys = pa.array([NOT_RECORDED] * len(lengths), pa.string())
        summed = (pa.table({"key": keys, "tokens": pa.array(lengths, pa.int64())}).group_by("key")
                  .aggregate([("tokens", "count"), ("tokens", "sum")]))
        names = summed.column("key").to_pylist()
        out[group] = dict(zip(names, summed.column("tokens_count").to_pylist(), strict=True))
        out[f"{group}_tokens"] = dict(zip(names, summed.column("tokens_sum").to_pylist(), strict=True))
    return out


def shard_stats(path: Path, split: str, encoding=None) -> dict | None:
    """The statistics of one shard ("train" or "val"). Token counts: its n_tokens column (None when it has no
    complete one), or, with `encoding`, every text tokenized."""
    pf = open_parquet(path)  # once: its footer serves every column read below
    lengths = _stored_lengths(pf, path) if encoding is None else _counted_lengths(pf, path, encoding)
    if lengths is None:
        return None
    return {"name": path.name, "split": split, "rows": int(lengths.size), "bytes": path.stat().st_size,
            "tokens": int(lengths.sum()), "counted": encoding is not None, "groups": _shard_groups(pf, lengths),
            "lengths": base64.b64encode(lengths.astype("<u4").tobytes()).decode("ascii")}


def lengths_of(stats: dict) -> np.ndarray:
    """The doc lengths (tokens) a shard's statistics hold, in row order."""
    return np.frombuffer(base64.b64decode(stats["lengths"]), dtype="<u4").astype(np.int64)
