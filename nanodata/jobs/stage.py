"""Where a corpus build keeps things, and the loop every mapped step runs: one owner for the layout.

    DEST/builds/<key>/                      the committed corpus (manifest.json, shards, _COMPLETE, report/)
    DEST/latest.json                        the build the destination serves
    DEST/.cache/                            each file's reusable result (nanodata.pipeline.chunking.reuse)
    DEST/.staging/<key>/s<FORMAT>-p<MB>/    one build's intermediates, for one partition size:
        plan.json                           what plan decided (written last)
        partitions/NNNNN.json, gzindex/, parts/   the cut inputs (nanodata.pipeline.chunking.partitions)
        units/NNNNN.sqlite + .mac + .json   global modes: a partition's parsed units, their seal (a keyed MAC:
                                            nanodata.storage.auth), its summary
        index/index.sqlite + .mac, summary.json   global modes: the reduce
        docs/NNNNN.json                     a partition's chunk summary; scatter/NNNNN.bin its docs by bucket
        near/                               near-dedup's signatures, band keys, edges/, removed list, summary.json
        tail.json, routed/, shards/         the tail (nanodata.jobs.tail)
        reuse/{units,docs}-NNNNN.keys       the cache keys each file pass used (retention, at cleanup)
        timings/STEP.json                   unmapped steps' seconds

Every mapped step goes through `each_item`: an item whose summary exists is done and is not run again; otherwise it
runs in a temp dir, writes its data, then its summary. Re-running a step, or a whole build, redoes nothing finished.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from nanodata.storage import join_uri as join
from nanodata.storage import read_json, write_json

# bump when what the steps stage changes: a build an older version left half done then starts a fresh stage instead
# of merging files it cannot read (its key, hence finished builds, stay the same). 5: planned digests, reuse keys;
# 6: unit stores and the index hold plain data (no pickles), each sealed; 7: docs routed to slots, shards planned
# after deduplication
STAGE_FORMAT = 7
PLAN = "plan.json"
SUMMARY = "summary.json"  # a reduce's summary, written after its output: its presence means the step finished
TAIL = "tail.json"        # what route decided: buckets, slots, the shards' Params, bucket batches
SHARD_PLAN = "shard_plan.json"  # the shards, sized after the buckets from the docs that survived deduplication
STAGED = ".staged"        # a partition's docs as staged lines (see writer.staged_line), not plain JSONL
UNITS, DOCS, INDEX, NEAR, SCATTER, ROUTED, SHARDS, REUSE, TIMINGS = (
    "units", "docs", "index", "near", "scatter", "routed", "shards", "reuse", "timings")


def build_uri(dest: str, key: str) -> str:
    return join(dest, "builds", key)


def staging_uri(dest: str, key: str) -> str:
    """Intermediates of build <key>; a dot name, so tools listing builds (the reports plugin) skip it."""
    return join(dest, ".staging", key)


def stage_uri(dest: str, key: str, partition_mb: float) -> str:
    """Partitioned intermediates of build <key>: one stage per partition size and STAGE_FORMAT, never mixed."""
    return join(staging_uri(dest, key), f"s{STAGE_FORMAT}-p{partition_mb:g}")


def cache_uri(dest: str) -> str:
    """The destination's per-file cache, shared by its builds (a dot name, as .staging)."""
    return join(dest, ".cache")


def item_name(number: int) -> str:
    return f"{number:05d}"


def item_uri(stage: str, folder: str, number: int, suffix: str = ".json") -> str:
    """An item's file: folder/NNNNN.json (its summary) or folder/NNNNN<suffix> (its data)."""
    return join(stage, folder, item_name(number) + suffix)


def item_uris(stage: str, folder: str, count: int) -> list[str]:
    """The summaries of items 0..count-1 of a folder."""
    return [item_uri(stage, folder, number) for number in range(count)]


def plan_uri(stage: str) -> str:
    return join(stage, PLAN)


def summary_uri(stage: str, folder: str) -> str:
    """A reduce's summary (index/, near/): written last."""
    return join(stage, folder, SUMMARY)


def timing_uri(stage: str, step: str) -> str:
    return join(stage, TIMINGS, step + ".json")


def reuse_keys_uri(stage: str, folder: str, number: int) -> str:
    """The cache keys a partition's file pass (folder: units or docs) used."""
    return join(stage, REUSE, f"{folder}-{item_name(number)}.keys")


def each_item(stage: str, folder: str, numbers, work):
    """(number, summary, ran) for each item: the summary recorded in folder/NNNNN.json, or, when there is none,
    work(number, tmp dir) -> summary run now (in a temp dir removed after), its `seconds` added, written after
    the data work wrote."""
    for number in numbers:
        uri = item_uri(stage, folder, number)
        summary = read_json(uri)
        ran = summary is None
        if ran:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix=f"nanodata-{folder}-") as tmp:
                summary = work(number, Path(tmp))
            summary["seconds"] = round(time.perf_counter() - started, 3)
            write_json(uri, summary)
        yield number, summary, ran
