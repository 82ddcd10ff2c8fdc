"""What a corpus build reads: its inputs with content hashes, their batches, and the build key.

A source is a JSONL file, or a directory (local or gs:// prefix) whose top-level *.jsonl files
are JSONL inputs and whose top-level sub-directories are C++ projects, one input each.
Content hashes: sha256 of local files; for gs:// the size and crc32c GCS keeps for every object,
so planning a build never downloads it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.jobs.store import is_gcs, join

log = logging.getLogger(__name__)

KEY_FORMAT = 1  # bump when a change to the build steps should rebuild every corpus


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _hash_of(items) -> str:
    return hashlib.sha256(json.dumps(sorted(items)).encode()).hexdigest()


def _file_hashes(source: str) -> dict[str, str]:
    """{relative name: content hash} of every file under a local dir or gs:// prefix."""
    if is_gcs(source):
        return {name: f"{e.size}:{e.crc32c}" for name, e in storage.open_side(source).list().items()}
    root = Path(source)
    return {p.relative_to(root).as_posix(): _sha256_file(p) for p in root.rglob("*") if p.is_file()}


def _list_dir(source: str) -> list[dict]:
    projects: dict[str, list] = {}
    inputs = []
    for name, digest in sorted(_file_hashes(source).items()):
        top, _, rest = name.partition("/")
        if top.startswith("."):
            continue
        if rest:
            projects.setdefault(top, []).append((rest, digest))
        elif top.endswith(".jsonl"):
            inputs.append({"name": top, "kind": "jsonl", "uri": join(source, top), "hash": digest})
        else:
            log.warning("source %s: ignoring %s (neither *.jsonl nor a project directory)", source, top)
    inputs += [{"name": top + "/", "kind": "project", "uri": join(source, top), "hash": _hash_of(files)}
               for top, files in projects.items()]
    return sorted(inputs, key=lambda i: i["name"])


def list_inputs(source: str) -> list[dict]:
    """[{"name", "kind": "jsonl"|"project", "uri", "hash"}], sorted by name; raises if there is none."""
    if source.endswith(".jsonl"):
        data = storage.read_bytes(source)
        if data is None:
            raise NanodataError(f"source {source}: no such file")
        return [{"name": source.rsplit("/", 1)[-1], "kind": "jsonl", "uri": source,
                 "hash": hashlib.sha256(data).hexdigest()}]
    if not is_gcs(source) and not Path(source).is_dir():
        raise NanodataError(f"source {source}: no such directory")
    inputs = _list_dir(source)
    if not inputs:
        raise NanodataError(f"source {source}: no *.jsonl files or project directories in it")
    return inputs


def build_key(inputs: list[dict], params: dict) -> str:
    """Same input contents and parameters, same key; anything else, a new key."""
    blob = json.dumps({"format": KEY_FORMAT, "params": params,
                       "inputs": [(i["name"], i["kind"], i["hash"]) for i in inputs]}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def batch_bounds(n_items: int, max_batches: int) -> list[tuple[int, int]]:
    """[start, stop) of contiguous, near-equal batches: one item per batch until there are more than max_batches."""
    if n_items < 1:
        return []
    n = min(n_items, max_batches)
    return [(n_items * b // n, n_items * (b + 1) // n) for b in range(n)]


def staging_uri(dest: str, key: str) -> str:
    """Intermediates of build <key>; a dot name, so tools listing builds (the reports plugin) skip it."""
    return join(dest, ".staging", key)
