"""Where a corpus build keeps things, and the loop every mapped step runs: one owner for the layout.

    DEST/builds/<key>/                      the committed corpus (manifest.json, shards, _COMPLETE, report/)
    DEST/latest.json                        the build the destination serves
    DEST/.cache/                            each file's reusable result (nanodata.pipeline.chunkbuild.reuse)
    DEST/.staging/<key>/s<FORMAT>-p<MB>/    one build's intermediates, for one partition size:
        plan.json                           what plan decided (written last)
        partitions/NNNNN.json, gzindex/, parts/   the cut inputs (nanodata.pipeline.chunkbuild.partitions)
        units/NNNNN.sqlite + .mac + .json   global modes: a partition's parsed units, their seal (a keyed MAC:
                                            nanodata.storage.auth), its summary
        index/index.sqlite + .mac, summary.json   global modes: the reduce
        docs/NNNNN.json                     a partition's chunk summary; scatter/NNNNN.bin its docs by bucket
        near/                               near-dedup's signatures, band keys, edges/, removed list, summary.json
        tail.json, routed/, shards/         the tail (nanodata.jobs.tail)
        reuse/{units,docs}-NNNNN.keys       the cache keys each file pass used (retention, at cleanup)
        timings/STEP.json                   unmapped steps' seconds

Every file one task stages for another is sealed (NAME.mac beside it: nanodata.storage.auth) and read only under
its seal. Every mapped step goes through `each_item`: an item whose summary is there under its seal is done and is
not run again; otherwise (none, or a forged one) it runs in a temp dir, writes its data, then its summary.
Re-running a step, or a whole build, redoes nothing finished. A step that finds a file it cannot make itself not
as sealed stops in one line (`broken_seals`) naming the file and the summary to delete so that its step runs again.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage import exists
from nanodata.storage import join_uri as join
from nanodata.storage.auth import BrokenSeal, Secret, read_sealed_json, seal_json

log = logging.getLogger(__name__)

# bump when what the steps stage changes: a build an older version left half done then starts a fresh stage instead
# of merging files it cannot read (its key, hence finished builds, stay the same). 5: planned digests, reuse keys;
# 6: unit stores and the index hold plain data (no pickles), each sealed; 7: docs routed to slots, shards planned
# after deduplication; 8: every staged file sealed
STAGE_FORMAT = 8
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


def units_uri(stage: str, number: int) -> str:
    """A partition's unit store (global modes)."""
    return item_uri(stage, UNITS, number, ".sqlite")


def index_uri(stage: str) -> str:
    return join(stage, INDEX, "index.sqlite")


def plan_uri(stage: str) -> str:
    return join(stage, PLAN)


def summary_uri(stage: str, folder: str) -> str:
    """A reduce's summary (index/, near/): written last."""
    return join(stage, folder, SUMMARY)


def near_uri(stage: str) -> str:
    """Where near-dedup's files live: signatures, band keys, edges, the removed list, its summary."""
    return join(stage, NEAR)


def near_summary_uri(stage: str) -> str:
    """settle's summary, written last: its presence means near-dedup is settled."""
    return summary_uri(stage, NEAR)


def timing_uri(stage: str, step: str) -> str:
    return join(stage, TIMINGS, step + ".json")


def reuse_keys_uri(stage: str, folder: str, number: int) -> str:
    """The cache keys a partition's file pass (folder: units or docs) used."""
    return join(stage, REUSE, f"{folder}-{item_name(number)}.keys")


def done_json(uri: str, secret: Secret):
    """A step's own record that it is done (a summary, plan.json, tail.json) under its seal, or None when there is
    none or it is not as sealed (logged): the step then does its work again, so a forged record skips nothing."""
    try:
        return read_sealed_json(uri, secret)
    except BrokenSeal as exc:
        log.warning("%s: done again", exc)
        return None


def each_item(stage: str, folder: str, numbers, work, secret: Secret):
    """(number, summary, ran) for each item: the summary recorded in folder/NNNNN.json under its seal, or, when
    there is none or it is not as sealed, work(number, tmp dir) -> summary run now (in a temp dir removed after), its
    `seconds` added, written (sealed) after the data work wrote."""
    for number in numbers:
        uri = item_uri(stage, folder, number)
        summary = done_json(uri, secret)
        ran = summary is None
        if ran:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix=f"nanodata-{folder}-") as tmp:
                summary = work(number, Path(tmp))
            summary["seconds"] = round(time.perf_counter() - started, 3)
            seal_json(uri, summary, secret)
        yield number, summary, ran


def redone_by(stage: str, uri: str) -> str:
    """The staged file whose deletion makes the step that wrote `uri` write it again on the next run: the item's
    summary (a mapped step's), a reduce's summary, else plan.json (plan cuts the inputs anew)."""
    name = uri[len(stage):].strip("/")
    folder, _, rest = name.partition("/")
    number = int(rest[:5]) if rest[:5].isdigit() else None
    if folder in (UNITS, DOCS, ROUTED, SHARDS) and number is not None:
        return item_uri(stage, folder, number)
    if folder == SCATTER and number is not None:
        return item_uri(stage, DOCS, number)
    if folder == INDEX:
        return summary_uri(stage, INDEX)
    if folder == NEAR:
        kind, _, file = rest.partition("/")
        number = int(file[:5]) if file[:5].isdigit() else None
        if kind in ("edges", "members") and number is not None:
            return item_uri(join(stage, NEAR), "edges", number)
        if kind in ("sigs", "bands", "names") and number is not None:  # written by the pass that read the files
            return item_uri(stage, UNITS if exists(item_uri(stage, UNITS, number)) else DOCS, number)
        return summary_uri(stage, NEAR)
    if name in (TAIL, SHARD_PLAN) or folder == TIMINGS:
        return uri
    return plan_uri(stage)


@contextlib.contextmanager
def broken_seals(stage: str):
    """A step's reads of files it cannot make itself: one that is not as sealed (BrokenSeal) stops the step in one
    line naming it and what to delete so that the step that wrote it writes it again."""
    try:
        yield
    except BrokenSeal as exc:
        raise NanodataError(f"{exc}; delete {redone_by(stage, exc.uri)} and run the build again (its step makes it "
                            "anew)") from None
