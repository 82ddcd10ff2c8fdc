"""What a corpus build reads: its inputs with content hashes, their batches, and the build key.

A source is a JSONL file (.jsonl, .jsonl.gz, .jsonl.zst), or a directory (local or gs:// prefix)
whose top-level JSONL files are inputs and whose C++ files form one project tree: each top-level
sub-directory is a project, C++ files directly in it form a project named after it. That is
exactly what `nanodata chunk --inputs DIR/*.jsonl --project-dirs DIR` reads, in the same order.

Content hashes are streamed: sha256 of local files (read in blocks); for gs:// the size and crc32c
GCS keeps for every object, so planning a build never downloads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.partitions import listing_path
from nanodata.pipeline.chunkbuild.reuse import CHUNK_FORMAT
from nanodata.pipeline.chunkbuild.sources import Problem, hashed_tree_files, is_jsonl
from nanodata.settings import CPP_EXTENSIONS
from nanodata.storage import is_gcs
from nanodata.storage import join_uri as join
from nanodata.storage.gcs import list_blobs

log = logging.getLogger(__name__)

# bump when what the steps after the chunker make of its docs changes (dedupe, the shuffle, the shards): every build
# key changes. The chunker's own output is versioned by reuse.CHUNK_FORMAT, also in the key: a chunker change bumps
# that one number, which changes both the cache's keys and the build's.
KEY_FORMAT = 8


def _top_level(source: str) -> list[str]:
    """Names of the files directly in a local dir or gs:// prefix."""
    if not is_gcs(source):
        return sorted(e.name for e in os.scandir(source) if e.is_file())
    _, prefix = storage.parse_gs(source.rstrip("/") + "/")
    return sorted(b.name[len(prefix):] for b in list_blobs(source, delimiter="/"))


def tree_digest(root: str, extensions: tuple[str, ...] = CPP_EXTENSIONS, listing=None) -> tuple[str, int, int]:
    """(hash, files, bytes) of a project tree's C++ files: their paths, sizes and contents, streamed. `listing`, a
    text file, gets each file's (path, size, digest) or problem as a JSON line, for partitions.plan_partitions: the
    tree is walked and read once per plan, and each file's digest reaches the task that chunks it."""
    h = hashlib.sha256()
    files = total = 0
    for rel, size, digest in hashed_tree_files(root, extensions):
        if isinstance(rel, Problem):
            h.update(f"{rel}\n".encode())
            if listing is not None:
                listing.write(json.dumps({"problem": [rel.where, rel.reason, rel.status]}) + "\n")
            continue
        name = rel if "/" in rel else f"{root.rstrip('/').rsplit('/', 1)[-1]}/{rel}"  # as docs name it
        h.update(f"{name}\t{size}\t{digest}\n".encode())
        if listing is not None:
            listing.write(json.dumps([rel, size, digest]) + "\n")
        files += 1
        total += size
    return h.hexdigest(), files, total


def list_inputs(source: str, listings: Path | None = None, extensions: tuple[str, ...] = CPP_EXTENSIONS) -> list[dict]:
    """[{"name", "kind": "jsonl" | "tree", "uri", "hash"}] in run order; raises if there is nothing to chunk.
    listings: a directory where the tree input's file listing goes (NNNNN.listing, see tree_digest); extensions:
    the tree's C++ files."""
    source = source.rstrip("/") if source != "/" else source
    if is_jsonl(source):
        return [{"name": source.rsplit("/", 1)[-1], "kind": "jsonl", "uri": source,
                 "hash": storage.content_digest(source)}]
    if not is_gcs(source) and not Path(source).is_dir():
        raise NanodataError(f"source {source}: no such directory (or a .jsonl / .jsonl.gz / .jsonl.zst file)")
    inputs = [{"name": name, "kind": "jsonl", "uri": join(source, name), "hash": storage.content_digest(join(source, name))}
              for name in _top_level(source) if is_jsonl(name)]
    with contextlib.ExitStack() as stack:
        listing = None if listings is None else stack.enter_context(open(listing_path(listings, len(inputs)), "w"))
        digest, files, _ = tree_digest(source, extensions, listing=listing)
    if files:
        inputs.append({"name": source.rsplit("/", 1)[-1] + "/", "kind": "tree", "uri": source, "hash": digest})
    if not inputs:
        raise NanodataError(f"source {source}: no JSONL inputs (.jsonl, .jsonl.gz, .jsonl.zst) and no C++ files "
                            f"({', '.join(extensions)}) in it")
    return inputs


def build_key(inputs: list[dict], params: dict) -> str:
    """Same input contents and parameters, same key; anything else, a new key. Benchmark files (`decontaminate`)
    count by their contents, as inputs do."""
    if params.get("decontaminate"):
        params = {**params, "decontaminate": [{"uri": uri, "hash": storage.content_digest(uri)}
                                              for uri in params["decontaminate"]]}
    blob = json.dumps({"format": KEY_FORMAT, "chunker": CHUNK_FORMAT, "params": params,
                       # a tree's docs never name where it lies, so neither does the key
                       "inputs": [(i["name"] if i["kind"] == "jsonl" else "", i["kind"], i["hash"]) for i in inputs]},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def batch_bounds(n_items: int, max_batches: int) -> list[tuple[int, int]]:
    """[start, stop) of contiguous, near-equal batches: one item per batch until there are more than max_batches."""
    if n_items < 1:
        return []
    n = min(n_items, max_batches)
    return [(n_items * b // n, n_items * (b + 1) // n) for b in range(n)]
