"""Pretraining shards over HTTP into DEST: plan batches → download + verify + upload each batch → finalize.

A shard already in DEST is never downloaded again, so re-runs (and larger num_shards later)
only fetch what is missing. DEST/_COMPLETE is written once every requested shard is there.
"""

from __future__ import annotations

import logging
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nanodata import storage
from nanodata.corpus import put_dir
from nanodata.corpus.layout import mark_complete
from nanodata.dataset import open_parquet, read_texts
from nanodata.jobs import MAX_MAPPED_TASKS
from nanodata.jobs.inputs import batch_bounds
from nanodata.storage import join_uri as join

log = logging.getLogger(__name__)


def plan(num_shards: int, max_batches: int = MAX_MAPPED_TASKS) -> list[list[int]]:
    """[start, stop) shard-index ranges, one per mapped download task."""
    return [list(b) for b in batch_bounds(num_shards, max_batches)]


def _verify(path: Path) -> int:
    """Rows of a downloaded shard; raises NanodataError unless every row group has a string `text` column."""
    pf = open_parquet(path)
    for rg in range(pf.num_row_groups):
        read_texts(pf, path, rg)
    return pf.metadata.num_rows


def download_batch(base_url: str, start: int, stop: int, dest: str, *, workers: int = 4) -> dict:
    """Download shards start..stop-1, verify each and upload it to DEST; returns counts."""
    from nanodata.pipeline.download import download_single_file, shard_name

    todo = [i for i in range(start, stop) if not storage.exists(join(dest, shard_name(i)))]
    with tempfile.TemporaryDirectory(prefix="nanodata-download-") as tmp:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            paths = list(pool.map(lambda i: download_single_file(i, base_url, tmp), todo))
        rows = sum(_verify(p) for p in paths)
        uploaded = put_dir(Path(tmp), dest) if paths else {"bytes": 0}
    log.info("shards %d..%d: %d downloaded, %d already in %s", start, stop - 1, len(todo), stop - start - len(todo), dest)
    return {"downloaded": len(todo), "skipped": stop - start - len(todo), "rows": rows, "bytes": uploaded["bytes"]}


def finalize(dest: str, num_shards: int, batches: list[dict]) -> dict:
    """Check every shard is in DEST, then write DEST/_COMPLETE; returns counts for the Asset event."""
    from nanodata.pipeline.download import shard_name

    missing = [shard_name(i) for i in range(num_shards) if not storage.exists(join(dest, shard_name(i)))]
    if missing:
        raise RuntimeError(f"{dest}: {len(missing)} shard(s) missing after download, e.g. {missing[0]}")
    mark_complete(dest)
    return {"uri": dest, "shards": num_shards, "downloaded": sum(b["downloaded"] for b in batches),
            "downloaded_bytes": sum(b["bytes"] for b in batches)}
