"""The mapped tail of the C++ corpus build: scatter (in each chunk task) → bucket (mapped) → shard (mapped).

No task reads the whole corpus. The exchange is MapReduce's:
- scatter: a chunk task regroups its partition's docs by dedupe bucket (`shuffle.bucket_of` of the
  content digest, B buckets chosen by plan from the input size) into scatter/PPPPP.bin, one byte range per
  bucket (offsets in the partition's summary). Each record is "RANK POS " + the staged line, where
  (rank, partition, POS) is the doc's place in the order a one-process run writes docs in.
- bucket b: reads range b of every partition, keeps the first occurrence of each digest in that order
  (equal texts always meet in one bucket, so this equals a serial scan's dedupe), and routes each kept doc
  to val (`shuffle.val_mask`) or to one of VSHARDS fixed *slots* (`shuffle.shards_of`) into routed/BBBBB.bin,
  one byte range per slot, counting the docs of each.
- plan (`plan_shards`, unmapped, after every bucket): the shards are sized from the docs that survived
  deduplication: S train shards, as many as the Params ask for (docs per shard, and the shard size cap), each a
  run of consecutive slots holding about 1/S of the docs. Slots and counts do not depend on how the work was cut.
- shard s: reads its slots' ranges of every bucket (one range each: its slots are consecutive), sorts the docs by
  `shuffle.shuffle_key` (SortedSpool: keys in memory, texts on disk) and writes its parquet files straight into the
  build's directory or bucket prefix.
So the files are byte-identical for any partition size, bucket count or worker count.

Each step writes its data, then its summary; a step whose summary exists returns it. A killed task
rewrites its files whole on retry (local: temp + rename; GCS: one upload per object), so nothing is
duplicated or lost. Every file is sealed (nanodata.storage.auth): scatter and routed files piece by piece, a piece
per bucket or slot, so a task reading its ranges checks just those bytes as they stream.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import mmap
import os
from array import array
from pathlib import Path

import numpy as np

from nanodata import storage
from nanodata.corpus.layout import MANIFEST, Manifest, ShardEntry, is_complete, mark_complete
from nanodata.jobs import MAX_MAPPED_TASKS
from nanodata.jobs.inputs import batch_bounds
from nanodata.pipeline.chunkbuild.stage import (
    DOCS,
    ROUTED,
    SCATTER,
    SHARD_PLAN,
    SHARDS,
    TAIL,
    done_json,
    each_item,
    item_uri,
    item_uris,
    plan_uri,
)
from nanodata.pipeline.chunkbuild.writer import from_staged, staged_gid
from nanodata.pipeline.dedup.exact import first_occurrences
from nanodata.pipeline.dedup.near import is_removed
from nanodata.pipeline.shard_stats import shard_stats
from nanodata.pipeline.shuffle import (
    ROW_GROUP_BYTES,
    ROW_GROUP_ROWS,
    SortedSpool,
    bucket_of,
    shards_of,
    shuffle_key,
    val_mask,
)
from nanodata.storage import is_gcs
from nanodata.storage import join_uri as join
from nanodata.storage.auth import Secret, read_sealed_json, read_sealed_jsons, seal_json, sealed_files, sealed_output

log = logging.getLogger(__name__)

VAL_NAME = "val_shard.parquet"
# the slots buckets route train docs into; a shard is a run of consecutive slots, so S is chosen once the docs that
# survive deduplication are counted, from the Params alone (any S up to VSHARDS; a slot holds 1/VSHARDS of them)
VSHARDS = 1024


MIN_TASK_BYTES = 8 << 20  # a mapped task's fixed cost (a process, a few requests) is paid for this much data at least
# a bucket task dedupes and routes its docs at ~150 MB/s: under this much input its ~1 s of fixed cost (a worker
# process, Airflow's hand-offs) would outweigh its work, so buckets are sized by the data, never by the partitions
BUCKET_TASK_BYTES = 512 << 20


def bucket_count(input_bytes: int, partition_bytes: int, limit: int = MAX_MAPPED_TASKS) -> int:
    """B: one bucket per partition's worth of input, but BUCKET_TASK_BYTES of input each at least: a bucket task's
    work per byte is a small fraction of a chunk task's, so as many bucket tasks as partitions would each spend
    more on starting than on working."""
    return max(1, min(limit, math.ceil(input_bytes / max(partition_bytes, BUCKET_TASK_BYTES))))


def shard_tasks(shards: int, doc_bytes: int) -> int:
    """How many mapped tasks write the S train shards and val: each writes MIN_TASK_BYTES of docs at least, so a
    small rows_per_file makes more files, not more tasks."""
    return max(1, min(shards + 1, MAX_MAPPED_TASKS, math.ceil(doc_bytes / MIN_TASK_BYTES)))


def shard_bounds(slot_docs: np.ndarray, slot_bytes: np.ndarray, rows_per_file: int, shard_bytes: int) -> list[int]:
    """The S + 1 slot bounds of the train shards: S = as few as hold at most rows_per_file docs and shard_bytes of
    docs each on average (at least 1, at most VSHARDS), each shard the consecutive slots up to where the running
    count of docs passes its share."""
    docs, size = int(slot_docs.sum()), int(slot_bytes.sum())
    shards = max(1, min(len(slot_docs), max(math.ceil(docs / rows_per_file), math.ceil(size / shard_bytes))))
    running = np.cumsum(slot_docs)
    cuts = np.searchsorted(running, np.arange(1, shards) * docs / shards, side="left") + 1
    return [0, *np.maximum.accumulate(np.minimum(cuts, len(slot_docs))).tolist(), len(slot_docs)]


def shard_file(shard: int, k: int) -> str:
    return f"shard_{shard:05d}_{k:03d}.parquet"


def _sorted_copy(src: Path, keys: np.ndarray, n_keys: int, starts, lengths, out, prefix=None) -> list[int]:
    """Copy src's records (starts, lengths) to out (a SealedWriter) in stable order of their keys (0..n_keys-1),
    each behind prefix(record) when given, each key's range one piece of the seal; returns the n_keys + 1 byte
    offsets of each key's range in out."""
    offsets = [0]
    with _mapped(src) as view:
        for j in np.argsort(keys, kind="stable").tolist():
            while len(offsets) <= keys[j]:  # the ranges before this key's end here (an empty one where it began)
                out.cut()
                offsets.append(out.tell())
            data = view[starts[j]:starts[j] + lengths[j]]
            out.write(prefix(j) + data if prefix is not None else data)
    while len(offsets) < n_keys:
        out.cut()
        offsets.append(out.tell())
    offsets.append(out.tell())  # the last range ends with the file (sealed_output ends its piece)
    return offsets


@contextlib.contextmanager
def _mapped(path: Path):
    """A local file's bytes, mapped read-only (b"" for an empty file, which cannot be mapped): the docs of a staged
    file are sliced out of it in place, not read one by one (a copy or a system call each)."""
    with open(path, "rb") as f:
        if not os.fstat(f.fileno()).st_size:
            yield b""
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            yield view


def scatter(staged: Path, groups: list, buckets: int, out_uri: str, tmp: Path, secret: Secret) -> dict:
    """A partition's staged docs (groups: [rank, start, stop] ranges in file order) regrouped by bucket."""
    keys, starts, lengths, ranks = array("q"), array("Q"), array("Q"), array("q")
    with _mapped(staged) as view:
        for rank, start, stop in groups:
            pos = start
            while pos < stop:
                end = view.find(b"\n", pos, stop) + 1 or stop  # a staged doc is a line
                keys.append(bucket_of(bytes.fromhex(view[pos:pos + 32].decode("ascii")), buckets))
                starts.append(pos)
                lengths.append(end - pos)
                ranks.append(rank)
                pos = end
    with sealed_output(out_uri, secret, tmp) as out:
        offsets = _sorted_copy(staged, np.array(keys, dtype=np.int64), buckets, starts, lengths, out,
                               prefix=lambda j: f"{ranks[j]} {starts[j]} ".encode())
    return {"bucket_offsets": offsets, "doc_bytes": int(sum(lengths))}


def route(stage: str, key: str, *, rows_per_file: int, shard_bytes: int, val_fraction: float,
          secret: Secret) -> list[dict]:
    """Unmapped bookkeeping after chunk: the tail's settings and the bucket batches to map."""
    tail = done_json(join(stage, TAIL), secret)
    if tail is None:
        plan_ = read_sealed_json(plan_uri(stage), secret, required=True)
        tail = {"buckets": plan_["buckets"], "slots": VSHARDS, "rows_per_file": rows_per_file,
                "shard_bytes": shard_bytes, "val_fraction": val_fraction, "partitions": plan_["partitions"],
                "bucket_batches": batch_bounds(plan_["buckets"], MAX_MAPPED_TASKS)}
        seal_json(join(stage, TAIL), tail, secret)
    log.info("build %s: %d buckets", key, tail["buckets"])
    return [{"key": key, "stage": stage, "batch": b} for b in range(len(tail["bucket_batches"]))]


def plan_shards(stage: str, secret: Secret) -> dict:
    """Unmapped, after every bucket: the train shards sized from the docs that survived deduplication (the buckets'
    counts per slot), written once: {"shards": S, "bounds": S + 1 slot bounds, "shard_batches"}; shard S is val."""
    planned = done_json(join(stage, SHARD_PLAN), secret)
    if planned is None:
        tail = read_sealed_json(join(stage, TAIL), secret, required=True)
        slots = tail["slots"]
        docs, size = np.zeros(slots + 1, dtype=np.int64), np.zeros(slots + 1, dtype=np.int64)
        for summary in read_sealed_jsons(item_uris(stage, ROUTED, tail["buckets"]), secret, required=True):
            docs += np.asarray(summary["slot_docs"], dtype=np.int64)
            size += np.diff(np.asarray(summary["shard_offsets"], dtype=np.int64))
        bounds = shard_bounds(docs[:slots], size[:slots], tail["rows_per_file"], tail["shard_bytes"])
        shards = len(bounds) - 1
        planned = {"shards": shards, "bounds": bounds, "docs": int(docs.sum()), "bytes": int(size.sum()),
                   "shard_batches": batch_bounds(shards + 1, shard_tasks(shards, int(size.sum())))}
        seal_json(join(stage, SHARD_PLAN), planned, secret)
    return planned


def shard_refs(stage: str, key: str, secret: Secret) -> list[dict]:
    planned = plan_shards(stage, secret)
    log.info("build %s: %d train shards + val from %d docs after deduplication", key, planned["shards"],
             planned["docs"])
    return [{"key": key, "stage": stage, "batch": b} for b in range(len(planned["shard_batches"]))]


def _each(stage: str, kind: str, batch: int, work, secret: Secret) -> dict:
    """work(tail, number, tmp) for each bucket or shard of a batch not yet done (stage.each_item); the totals."""
    tail = read_sealed_json(join(stage, TAIL), secret, required=True)
    if kind == "shard":
        tail = {**tail, **read_sealed_json(join(stage, SHARD_PLAN), secret, required=True)}
    start, stop = tail[f"{kind}_batches"][batch]
    totals = {"docs": 0, "bytes": 0, "seconds": 0.0}
    folder = ROUTED if kind == "bucket" else SHARDS
    for _, summary, _ in each_item(stage, folder, range(start, stop), lambda number, tmp: work(tail, number, tmp),
                                   secret):
        for name in totals:
            totals[name] += summary[name]
    return {"batch": batch, **totals}


def _ranges(stage: str, folder: str, summaries: str, count: int, key: str, suffix: str,
            secret: Secret) -> list[tuple]:
    """[(data file under its seal, its byte offsets)] of items 0..count-1: folder/NNNNN<suffix>, the offsets from
    each item's summary in `summaries` (`key`), the summaries and seals read at once."""
    read = read_sealed_jsons(item_uris(stage, summaries, count), secret, required=True)
    files = sealed_files([item_uri(stage, folder, n, suffix) for n in range(count)], secret)
    return [(file, summary[key]) for file, summary in zip(files, read, strict=True)]


def _read_ranges(files_offsets, first: int, last: int | None = None):
    """Yield the records (lines) of ranges first..last (default: first alone) of each (sealed file, offsets) in
    order, each range checked as it streams."""
    for file, offsets in files_offsets:
        start, stop = offsets[first], offsets[(first if last is None else last) + 1]
        if stop > start:
            with file.open(start, stop) as f:
                yield from f


def bucket_batch(ref: dict, *, seed: int, removed: np.ndarray | None = None, secret: Secret) -> dict:
    """Mapped: each bucket of the batch without the docs of near-copy files (`removed`: their sorted gids) and
    exact duplicates (first occurrence in (rank, partition, position) order kept), its docs routed to val or a
    train shard."""
    stage = ref["stage"]

    @functools.cache
    def scattered(partitions: int) -> list:  # once per batch: every bucket of it reads range b of each partition
        return _ranges(stage, SCATTER, DOCS, partitions, "bucket_offsets", ".bin", secret)

    def work(tail, bucket, tmp):
        sources = scattered(tail["partitions"])
        hi, lo, order, gids = array("Q"), array("Q"), array("q"), array("Q")
        starts, lengths = array("Q"), array("Q")
        spool = tmp / "in.staged"
        size = 0
        with open(spool, "wb") as out:
            for p, source in enumerate(sources):
                for record in _read_ranges([source], bucket):
                    rank, pos, line = record.split(b" ", 2)
                    digest = bytes.fromhex(line[:32].decode("ascii"))
                    hi.append(int.from_bytes(digest[:8], "big"))
                    lo.append(int.from_bytes(digest[8:], "big"))
                    # a one-process run writes docs in (rank, partition, position) order
                    order.extend((int(rank), p, int(pos)))
                    gids.append(staged_gid(line))
                    starts.append(size)
                    lengths.append(len(line))
                    out.write(line)
                    size += len(line)
        n = len(hi)
        # near-copies' docs go first, so a doc they share with a kept file is kept in that file
        left = np.flatnonzero(~is_removed(removed, np.frombuffer(gids, dtype=np.uint64))) if removed is not None \
            else np.arange(n)
        place = np.frombuffer(order, dtype=np.int64).reshape(n, 3)
        kept = left[first_occurrences(np.frombuffer(hi, dtype=np.uint64)[left], np.frombuffer(lo, dtype=np.uint64)[left],
                                      place[left])]
        slots = tail["slots"]
        keys = np.empty((len(kept), 2), dtype=">u8")  # each kept doc's digest, as its bytes
        keys[:, 0], keys[:, 1] = np.frombuffer(hi, dtype=np.uint64)[kept], np.frombuffer(lo, dtype=np.uint64)[kept]
        raw = keys.tobytes()
        digests = [raw[at:at + 16] for at in range(0, len(raw), 16)]
        dest = np.where(val_mask(digests, seed, tail["val_fraction"]), slots,
                        shards_of(digests, seed, slots)).astype(np.int64)
        with sealed_output(item_uri(stage, ROUTED, bucket, ".bin"), secret, tmp) as out:
            offsets = _sorted_copy(spool, dest, slots + 1, _take(starts, kept), _take(lengths, kept), out)
        return {"bucket": bucket, "docs_in": n, "docs": len(kept), "duplicates": len(left) - len(kept),
                "near_removed": n - len(left), "bytes_in": size, "bytes": offsets[-1], "shard_offsets": offsets,
                "slot_docs": np.bincount(dest, minlength=slots + 1).tolist()}

    return {"key": ref["key"], "stage": stage, **_each(stage, "bucket", ref["batch"], work, secret)}


def _take(values: array, index: np.ndarray) -> list[int]:
    return np.frombuffer(values, dtype=np.uint64)[index].tolist() if len(index) else []


def shard_batch(ref: dict, *, build: str, seed: int, tokenizer: str, secret: Secret) -> dict:
    """Mapped: each shard of the batch sorted by the shuffle key and written into the build (`build` URI), with
    the report's statistics of each file it wrote in its summary (tokens from the n_tokens column, else counted
    with `tokenizer`), so the report reads no shard."""
    stage = ref["stage"]

    @functools.cache
    def routed(buckets: int) -> list:  # once per batch: every shard of it reads range s of each bucket
        return _ranges(stage, ROUTED, ROUTED, buckets, "shard_offsets", ".bin", secret)

    def work(tail, shard, tmp):
        sources = routed(tail["buckets"])
        val = shard == tail["shards"]
        first, last = (tail["slots"], tail["slots"]) if val else (tail["bounds"][shard], tail["bounds"][shard + 1] - 1)
        spool = SortedSpool(tmp / "shard.jsonl")
        try:
            for line in _read_ranges(sources, first, last) if last >= first else ():
                digest, _, _, _, doc = from_staged(line)
                spool.add(shuffle_key(digest, seed), doc)
            names: list[str] = []

            def name_of(k):
                names.append(VAL_NAME if val else shard_file(shard, k))
                return (tmp / names[-1]) if is_gcs(build) else Path(join(build, names[-1]))

            unbounded = 2 ** 62  # val is one file, as every reader expects
            files = spool.write(name_of, rows_per_file=unbounded if val else tail["rows_per_file"],
                                file_bytes=unbounded if val else tail["shard_bytes"], row_group_rows=ROW_GROUP_ROWS,
                                row_group_bytes=ROW_GROUP_BYTES)
        finally:
            spool.close()
        local = [(tmp / name) if is_gcs(build) else Path(join(build, name)) for name in names]
        stats = [_file_stats(path, "val" if val else "train", tokenizer) for path in local]
        if is_gcs(build):  # straight to the build's prefix: no local copy of the corpus, no serial upload
            for name in names:
                storage.write_file(tmp / name, join(build, name))
                (tmp / name).unlink()
        return {"shard": shard, "val": val, "files": files, "docs": sum(f["rows"] for f in files),
                "bytes": sum(f["bytes"] for f in files), "stats": stats}

    return {"key": ref["key"], "stage": stage, **_each(stage, "shard", ref["batch"], work, secret)}


def _file_stats(path: Path, split: str, tokenizer: str) -> dict:
    """One written file's statistics for the report: its n_tokens column, else every text tokenized."""
    from nanodata.tokenizer import load

    return shard_stats(path, split) or shard_stats(path, split, load(tokenizer).encoding)


def commit(build: str, stage: str, created_by: str, secret: Secret) -> Manifest:
    """Unmapped bookkeeping: manifest.json from the shard summaries, then _COMPLETE. Returns the manifest."""
    if is_complete(build):
        return Manifest.from_bytes(storage.read_bytes(join(build, MANIFEST)), join(build, MANIFEST))
    planned = read_sealed_json(join(stage, SHARD_PLAN), secret, required=True)
    shards, val = [], None
    for s, summary in enumerate(read_sealed_jsons(item_uris(stage, SHARDS, planned["shards"] + 1), secret)):
        if summary is None:
            raise RuntimeError(f"shard {s} is not written ({item_uri(stage, SHARDS, s)} missing)")
        if summary["val"]:
            val = ShardEntry(**{k: v for k, v in summary["files"][0].items() if k != "tokens"}) if summary["files"] else None
        else:
            shards += [ShardEntry(**f) for f in summary["files"]]
    manifest = Manifest(shards=shards, val=val, total_rows=sum(s.rows for s in shards) + (val.rows if val else 0),
                        created_by=created_by)
    storage.write_bytes(join(build, MANIFEST), manifest.to_bytes())
    mark_complete(build)
    return manifest


def file_stats(stage: str, secret: Secret) -> list[dict]:
    """Every file's statistics, as the shard tasks computed them (see shard_batch), for the report."""
    planned = read_sealed_json(join(stage, SHARD_PLAN), secret, required=True)
    summaries = read_sealed_jsons(item_uris(stage, SHARDS, planned["shards"] + 1), secret, required=True)
    return [stats for summary in summaries for stats in summary["stats"]]


def bucket_stats(stage: str, secret: Secret) -> list[dict]:
    """Per bucket: docs in, docs kept, duplicates, bytes in and out, seconds (for the report)."""
    tail = read_sealed_json(join(stage, TAIL), secret) or {"buckets": 0}
    summaries = read_sealed_jsons(item_uris(stage, ROUTED, tail["buckets"]), secret)
    return [{k: (summary or {}).get(k) for k in ("bucket", "docs_in", "docs", "duplicates", "near_removed", "bytes_in",
                                                  "bytes", "seconds")} for summary in summaries]
