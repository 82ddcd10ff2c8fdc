"""The .npy token shard set (the build-nanogpt format): what `nanodata pretokenize` writes, what DataLoaderLite reads.

A set is committed by its meta.json, written last: it lists every shard's name, size and sha256 and the
tokenizer's identity. A reader takes only a committed set whose shards on disk are exactly those listed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage.files import file_digest

META_FILE = "meta.json"
META_VERSION = 2  # 2: shards carry bytes + sha256, and the tokenizer identity is recorded
SHARD_FILE = re.compile(r".+_(val|train)_\d+\.npy")  # every name a loader would take for a shard, any prefix

RERUN = "re-run 'nanodata pretokenize'"


def _meta_problem(meta) -> str | None:
    """What makes `meta` not a meta.json this version can check shards against; None if nothing."""
    if not isinstance(meta, dict):
        return f"a JSON {type(meta).__name__}, not an object"
    if meta.get("version") != META_VERSION:
        return f"version {meta.get('version')!r}, this nanodata reads version {META_VERSION}"
    if not isinstance(meta.get("tokenizer_identity"), str):
        return "no tokenizer_identity"
    shards = meta.get("shards")
    if not isinstance(shards, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) and type(s.get("bytes")) is int
            and isinstance(s.get("sha256"), str) for s in shards):
        return "shards[] needs name, bytes and sha256 for every shard"
    if bad := next((s["name"] for s in shards if not SHARD_FILE.fullmatch(s["name"]) or "/" in s["name"]), None):
        return f"shard name {bad!r} is not PREFIX_(val|train)_NNNNNN.npy"
    if len({s["name"] for s in shards}) != len(shards):
        return "a shard is listed twice"
    return None


def committed_meta(data_root: str | os.PathLike, verify: bool = False) -> dict:
    """meta.json of a finished pretokenize output, checked against the shards on disk.

    Every shard file in data_root (any prefix) must be listed and every listed one present with its
    size: a stat per shard, cheap at every start. verify=True also compares each shard's sha256,
    which reads all of them.
    """
    data_root = Path(data_root)
    if not data_root.is_dir():
        raise NanodataError(f"data_root {data_root} does not exist")
    path = data_root / META_FILE
    if not path.is_file():
        raise NanodataError(f"{data_root}: no {META_FILE}, so no finished token shard set (a pretokenize run was "
                            f"killed or failed, or none ran); {RERUN}")
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NanodataError(f"{path}: unreadable ({type(exc).__name__}: {exc}); {RERUN}") from None
    if problem := _meta_problem(meta):
        raise NanodataError(f"{path}: {problem}; {RERUN}")
    listed = {s["name"]: s for s in meta["shards"]}
    on_disk = {p.name for p in data_root.iterdir() if SHARD_FILE.fullmatch(p.name)}
    if missing := sorted(listed.keys() - on_disk):
        raise NanodataError(f"{data_root / missing[0]}: listed in {META_FILE} but missing; {RERUN}")
    if extra := sorted(on_disk - listed.keys()):
        raise NanodataError(f"{data_root / extra[0]}: a shard not in {META_FILE} (another run's); {RERUN}")
    for shard in meta["shards"]:
        shard_path = data_root / shard["name"]
        size = shard_path.stat().st_size
        if size != shard["bytes"]:
            raise NanodataError(f"{shard_path}: {size} bytes, {META_FILE} says {shard['bytes']}; {RERUN}")
        if verify and file_digest(shard_path) != shard["sha256"]:
            raise NanodataError(f"{shard_path}: sha256 differs from {META_FILE}; {RERUN}")
    return meta
