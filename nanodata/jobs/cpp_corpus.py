"""The C++ corpus build: plan → [parse (mapped) → index] → chunk (mapped) → [near (mapped) → settle] → route
→ bucket (mapped) → shard (mapped) → publish → report → cleanup.

`plan` cuts the inputs into partitions of about `partition_mb` MB (nanodata.pipeline.chunkbuild.partitions)
and picks the number of dedupe buckets from the input size. Global modes (cross-file, project, compilable)
first parse each partition into a unit store, reduce the stores to one index, then emit; local modes emit
straight away (parse and index have nothing to do). With near-dedup (the default), the pass that reads each file
(parse, or chunk in local modes) also writes its MinHash signature and LSH band keys to near/ (see
nanodata.pipeline.dedup.near); near tasks verify each group of bands' candidate pairs, and settle turns the pairs
into clusters and the list of files that lose their docs. Each chunk task scatters its docs by bucket; bucket
tasks drop the near-copies' docs and exact duplicates and route docs to shards, shard tasks write the parquet files into the build (see
nanodata.jobs.tail). Unmapped steps only keep the books: plan, route (the shard count from the chunk
tasks' counts), publish (manifest.json, _COMPLETE, then latest.json), report, cleanup (staging deleted once
committed). The corpus is byte-identical however it was cut and whatever the number of workers.

Each step reads its inputs from and writes its outputs to the run's stage (nanodata.pipeline.chunkbuild.stage owns the layout;
the final build goes to DEST/builds/<key>/), writes a partition's summary after its data, and first returns the
recorded result when it is there: re-running any step, or the whole build, redoes nothing that finished. Every
file a step stages for another is sealed with the build's secret (cache_secret) and read only under its seal: one
that is not as sealed (edited, moved, sealed with another secret) is made again by the step that finds it where that
step can make it (a unit store, the index, any step's own summary), else the step stops in one line naming it and
what to delete (nanodata.pipeline.chunkbuild.stage.broken_seals).

Nightly rebuilds cost what changed: the file passes go through the destination's per-file cache (DEST/.cache/,
nanodata.pipeline.chunkbuild.reuse), so a file whose content and settings are unchanged is not chunked again (in the
global modes, a project none of whose visible files changed is not re-emitted); plan hands each tree file's
content digest to its task, so such a file is not even read, and in a rebuild each JSONL record's (with its size and
names), so such a record's line is not parsed. The tail runs whole over every doc, reused or new:
the corpus is byte-identical to a build into an empty destination. cleanup records the keys the build used and
deletes the entries none of the last `cache_keep_runs` builds used.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from nanodata import storage
from nanodata.corpus.layout import Latest, is_complete, read_latest, write_latest
from nanodata.errors import NanodataError
from nanodata.jobs import MAX_MAPPED_TASKS, tail
from nanodata.jobs.inputs import batch_bounds, build_key, list_inputs
from nanodata.pipeline.chunkbuild import partitions as parts
from nanodata.pipeline.chunkbuild.stage import (
    DOCS,
    INDEX,
    REUSE,
    STAGED,
    UNITS,
    broken_seals,
    build_uri,
    cache_uri,
    done_json,
    each_item,
    index_uri,
    item_name,
    item_uri,
    item_uris,
    near_summary_uri,
    near_uri,
    plan_uri,
    reuse_keys_uri,
    stage_uri,
    staging_uri,
    summary_uri,
    timing_uri,
    units_uri,
)
from nanodata.ranges import CACHE_GRACE_HOURS, CACHE_KEEP, PARTITION_MB, ROWS_PER_FILE, SHARD_MB, VAL_FRACTION
from nanodata.settings import GLOBAL_MODES, SETTINGS, ChunkSettings
from nanodata.storage import is_gcs
from nanodata.storage import join_uri as join
from nanodata.storage.auth import (
    MAC_SUFFIX,
    BrokenSeal,
    Secret,
    checked_file,
    load_secret,
    read_sealed,
    read_sealed_json,
    read_sealed_jsons,
    seal_bytes,
    seal_json,
    sealed,
)

log = logging.getLogger(__name__)

SEED = 42  # parquet shuffle seed: fixed, so a build is a pure function of its key


def plan(source: str, dest: str, params: dict, partition_mb: float = PARTITION_MB.default,
         max_batches: int = MAX_MAPPED_TASKS, cache_secret: Secret | str | None = None) -> dict:
    """List and hash the inputs, cut them into partitions; return the mapped tasks' batches:
    {"key", "stage", "parse": [...], "chunk": [...], "near": [...]} (parse is empty in local modes, near without
    near-dedup; all are empty when the build is up to date).

    Up to date = this key's build is complete and latest.json already points at it: nothing to do,
    nothing written. A complete build that latest.json does not point at (inputs reverted to an
    earlier state) goes through the steps again, which find their outputs and only re-publish. cache_secret: what
    seals the staged files (every step is given the same; None: nanodata.storage.auth.load_secret); a plan.json
    that is not as sealed is planned again.
    """
    PARTITION_MB.check("partition_mb", partition_mb)  # the DAG Param's range and `nanodata chunk --partition-mb`'s
    settings = {k: v for k, v in params.items() if k in SETTING_NAMES}
    params = build_params(params)
    secret = load_secret(cache_secret)
    _check_cleaning(params)
    if params["resolver"] == "clang" and (is_gcs(source) or not Path(source).is_dir()):
        raise NanodataError(f"resolver clang: parses project trees on the workers' local disk, each file with its "
                            f"includes; source {source} is {'in a bucket' if is_gcs(source) else 'not a directory'}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nanodata-plan-") as listings:  # the trees' files, hashed once
        inputs = list_inputs(source, Path(listings), params["extensions"])
        key = build_key(inputs, params)
        stage = stage_uri(dest, key, partition_mb)
        latest = read_latest(dest)
        if is_complete(build_uri(dest, key)) and latest is not None and latest.key == key:
            log.info("build %s is up to date (%d inputs unchanged): nothing to do", key, len(inputs))
            return {"key": key, "stage": stage, "parse": [], "chunk": [], "near": []}
        planned = done_json(plan_uri(stage), secret)
        if planned is None:
            partition_bytes = int(partition_mb * 2 ** 20)
            n, total = parts.plan_partitions(inputs, stage, partition_bytes, params["extensions"], listings,
                                             secret=secret, cached=_cached(settings, dest, secret))
            planned = {"source": source, "params": params, "partition_mb": partition_mb, "inputs": inputs,
                       "partitions": n, "bytes": total, "buckets": tail.bucket_count(total, partition_bytes),
                       "batches": batch_bounds(n, max_batches), "near": _near_plan(params, total),
                       "cache": cache_uri(dest)}
            seal_json(timing_uri(stage, "plan"), {"seconds": round(time.perf_counter() - started, 3)}, secret)
            seal_json(plan_uri(stage), planned, secret)
    log.info("build %s: %d inputs in %d partitions of <= %g MB, %d batches", key, len(inputs),
             planned["partitions"], partition_mb, len(planned["batches"]))
    refs = [{"key": key, "stage": stage, "batch": b, "cache": cache_uri(dest)} for b in range(len(planned["batches"]))]
    near = [{"key": key, "stage": stage, "group": g} for g in range((planned["near"] or {}).get("groups", 0))]
    return {"key": key, "stage": stage, "parse": refs if params["mode"] in GLOBAL_MODES else [], "chunk": refs,
            "near": near}


def _staged_pieces(partition: dict):
    """(URI, (piece, field)) of each staged file a partition's pieces name: a gzip input's seek index, a
    decompressed file (a piece read from a file other than its input)."""
    for piece in partition["pieces"]:
        if piece.get("gzindex"):
            yield piece["gzindex"], (piece, "gzindex")
        if piece["kind"] == "jsonl" and piece["uri"] != piece["display"]:
            yield piece["uri"], (piece, "uri")


def _load_partition(stage: str, number: int, tmp: Path, secret: Secret) -> dict:
    """Partition `number` under its seal, each staged file it names replaced by a checked local copy (in `tmp`, or
    the staged file itself when local). Only plan makes them: one not as sealed stops the task (broken_seals)."""
    partition = parts.load_partition(stage, number, secret)
    for uri, (piece, name) in list(_staged_pieces(partition)):
        piece[name] = str(sealed(uri, secret, required=True).local(tmp / uri.rsplit("/", 1)[-1]))
    return partition


def _cached(settings: dict, dest: str, secret: Secret):
    """cached(content digest) -> bool for plan_partitions: whether the destination's cache holds the result of a
    file or record of that content, as far as the builds it keeps a record of used it (EntryStore.recorded: one small
    read, no listing). None when it holds none (a first build, or reuse off): every item then weighs its bytes. The
    records are not authenticated: one edited can change how the work is cut, never the corpus."""
    from nanodata.pipeline.chunkbuild.config import ChunkConfig
    from nanodata.storage.entries import EntryStore

    if not settings.get("reuse", True):
        return None
    used = EntryStore(cache_uri(dest), secret).recorded()
    if not used:
        return None
    config = ChunkConfig(**{k: v for k, v in settings.items() if k != "reuse"}, cache=cache_uri(dest),
                         cache_secret=secret)
    cache, kind = config.file_cache(), "parse" if config.mode in GLOBAL_MODES else "chunk"  # the file pass's key
    return lambda digest: cache.key(kind, digest) in used


SETTING_NAMES = {f.name for f in SETTINGS}
SHARD_PARAMS = {"rows_per_file": ROWS_PER_FILE.default, "shard_mb": SHARD_MB.default,
                "val_fraction": VAL_FRACTION.default}  # how the docs become shards (the tail's Params)


def build_params(params: dict) -> dict:
    """What decides a build's corpus, by name and each defaulted: the chunk settings of scope FILE and CORPUS
    (nanodata.settings; RUN ones, such as partition_mb, are dropped) and the shards' Params. What the build key
    hashes and plan.json records."""
    unknown = set(params) - SETTING_NAMES - set(SHARD_PARAMS)
    if unknown:
        raise TypeError(f"not build settings: {sorted(unknown)}")
    settings = ChunkSettings(**{k: v for k, v in params.items() if k in SETTING_NAMES})
    return {**settings.decisive(), **{k: params.get(k, default) for k, default in SHARD_PARAMS.items()}}


def _check_cleaning(params: dict) -> None:
    """The cleaning Params, checked in words before any work (a misspelt filter, a missing benchmark file), as
    `nanodata chunk` checks its flags; the tokenizer is loaded by the first mapped task, not here."""
    from nanodata.pipeline.cleaning.decontaminate import Decontaminator
    from nanodata.pipeline.cleaning.filters import parse_filter_list
    from nanodata.pipeline.cleaning.licenses import parse_license_list
    from nanodata.pipeline.cleaning.redact import parse_redact_list

    for name, parse in (("filters", parse_filter_list), ("redact", parse_redact_list),
                        ("licenses", parse_license_list)):
        value = params.get(name)
        if value is not None:
            parse(value if isinstance(value, str) else ",".join(value) or "none")  # build_params gives lists
    for uri in params.get("decontaminate") or ():
        if not (is_gcs(uri) or os.path.isabs(uri)):  # workers may run anywhere: a relative path means nothing there
            raise NanodataError(f"decontaminate {uri!r}: not an absolute path or gs://bucket/object")
    if params.get("decontaminate"):
        Decontaminator(tuple(params["decontaminate"]))


AVERAGE_FILE_BYTES = 4096  # a low guess of a C++ file's size: sizes the band groups before any file is read


def _near_plan(params: dict, total_bytes: int) -> dict | None:
    """Near-dedup's threshold and its number of band groups (mapped near tasks), or None without near-dedup."""
    from nanodata.pipeline.chunkbuild.graph import near_groups

    if params["dedup"] != "near":
        return None
    threshold = params["near_threshold"]
    return {"threshold": threshold, "groups": near_groups(total_bytes // AVERAGE_FILE_BYTES, threshold)}


def _signed(stage: str, plan_: dict, secret: Secret) -> list[tuple[int, dict]]:
    """Each partition's signature counts and band offsets, from the summaries of the pass that read its files."""
    kind = UNITS if plan_["params"]["mode"] in GLOBAL_MODES else DOCS
    summaries = read_sealed_jsons(item_uris(stage, kind, plan_["partitions"]), secret)
    missing = [p for p, s in enumerate(summaries) if s is None or "near" not in s]
    if missing:
        raise RuntimeError(f"partition {missing[0]} has no signatures ({item_uri(stage, kind, missing[0])})")
    return [(p, s["near"]) for p, s in enumerate(summaries)]


def near_batch(ref: dict, cache_secret: Secret | str | None = None) -> dict:
    """Mapped, after every file pass: one group of LSH bands, its candidate pairs verified into near/edges/.
    cache_secret: as plan's."""
    from nanodata.pipeline.chunkbuild import graph

    stage, group = ref["stage"], ref["group"]
    secret = load_secret(cache_secret)
    edges_uri = item_uri(near_uri(stage), "edges", group)
    summary = done_json(edges_uri, secret)
    if summary is None:
        started = time.perf_counter()
        with broken_seals(stage):
            plan_ = read_sealed_json(plan_uri(stage), secret, required=True)
            summary = graph.near_group(stage, group, plan_["near"]["groups"], plan_["near"]["threshold"],
                                       _signed(stage, plan_, secret), secret)
        summary["seconds"] = round(time.perf_counter() - started, 3)
        seal_json(edges_uri, summary, secret)
        log.info("near group %d: %d candidate pairs, %d verified, %.1f s", group, summary["candidate_pairs"],
                 summary["edges"], summary["seconds"])
    return {"key": ref["key"], "stage": stage, **summary}


def settle(stage: str, key: str, secret: Secret) -> dict:
    """After the near tasks (route's first act: one unmapped task fewer): the verified pairs' clusters,
    near/removed.bin (the files whose docs the bucket tasks drop) and near/summary.json. Returns its counts ({}
    without near-dedup)."""
    from nanodata.pipeline.chunkbuild import graph

    plan_ = read_sealed_json(plan_uri(stage), secret, required=True)
    if plan_.get("near") is None:
        return {}
    summary = done_json(near_summary_uri(stage), secret)
    if summary is None:
        with _timed(stage, "settle", secret):
            summary = graph.settle(stage, plan_["near"]["groups"], plan_["near"]["threshold"],
                                   _signed(stage, plan_, secret), secret)
        log.info("near-duplicates of build %s: %d of %d files removed (%d bytes) in %d clusters", key,
                 summary["files_removed"], summary["files_signed"], summary["bytes_removed"], summary["clusters"])
    return {k: summary[k] for k in ("files_removed", "bytes_removed", "clusters", "files_signed")}


def _batch_partitions(stage: str, batch: int, secret: Secret) -> list[int]:
    start, stop = read_sealed_json(plan_uri(stage), secret, required=True)["batches"][batch]
    return list(range(start, stop))


def _settings(params: dict, ref: dict, reuse: bool, secret: Secret) -> dict:
    """What a worker needs, checked as `nanodata chunk` checks its flags (params: settings by name, as
    nanodata.settings.from_params gives the DAG's Params); the per-file cache the plan named (ref["cache"]), its
    entries authenticated with `secret`. reuse=False: every file chunked again, its entry refreshed."""
    from nanodata.pipeline.chunkbuild.config import ChunkConfig

    unknown = set(params) - SETTING_NAMES
    if unknown:
        raise TypeError(f"not chunk settings: {sorted(unknown)}")
    return ChunkConfig(**params, cache=ref.get("cache"), reuse=reuse, cache_secret=secret).worker_settings()


def _each_partition(stage: str, batch: int, kind: str, work, secret: Secret) -> dict:
    """Run work(partition, tmp dir) -> summary for each partition of a batch not yet done (stage.each_item); the
    summary (kind/NNNNN.json) is written after the partition's data. Returns the batch's totals."""
    from nanodata.pipeline.chunkbuild.reuse import totals as reuse_totals

    totals: dict = {"partitions": 0, "files_read": 0, "bytes_read": 0, "files_skipped": 0, "files_failed": 0,
                    "docs": 0, "tokens": 0, "doc_bytes": 0}
    for number, summary, ran in each_item(stage, kind, _batch_partitions(stage, batch, secret),
                                          _partition_run(stage, kind, work, secret), secret):
        if ran:
            reuse = reuse_totals(summary.get("reuse", {}))
            log.info("%s partition %d: %s files read (%.1f MB), %s skipped, %s failed, %s docs, %s tokens, %.1f s, "
                     "%.2f MB/s; %s files reused (%.1f MB), %s chunked (%.1f MB), %s corrupt cache entries rebuilt",
                     kind, number, f"{summary['files_read']:,}", summary["bytes_read"] / 1e6,
                     f"{summary['files_skipped']:,}", f"{summary['files_failed']:,}", f"{summary['docs']:,}",
                     f"{summary['tokens']:,}", summary["seconds"], summary["mb_per_s"], f"{reuse['files_reused']:,}",
                     reuse["bytes_reused"] / 1e6, f"{reuse['files_chunked']:,}", reuse["bytes_chunked"] / 1e6,
                     f"{reuse['entries_rebuilt']:,}")
        totals["partitions"] += 1
        for name in totals:
            if name != "partitions":
                totals[name] += summary.get(name, 0)  # parse summaries count no docs
    return totals


def _partition_run(stage: str, kind: str, work, secret: Secret):
    """run(number, tmp dir) -> summary of one partition for stage.each_item: work(partition, tmp) timed."""
    def run(number, tmp):
        partition = _load_partition(stage, number, tmp, secret)
        log.info("%s %s", kind, parts.describe(partition))
        started = time.perf_counter()
        summary = work(partition, tmp)
        seconds = time.perf_counter() - started
        return {**summary, "partition": number,
                "mb_per_s": round(summary["bytes_read"] / seconds / 1e6, 3) if seconds else 0.0}

    return run


def _used_keys(tally, stage: str, kind: str, partition: int, secret: Secret) -> dict:
    """Record the cache keys a partition's file pass used (reuse/, read by cleanup); its per-project counts."""
    seal_bytes(reuse_keys_uri(stage, kind, partition), bytes(tally.reuse.used), secret)
    return tally.reuse.to_dict()


def parse_batch(ref: dict, reuse: bool = True, cache_secret: Secret | str | None = None, **params) -> dict:
    """Global modes, map 1: each partition of the batch parsed into units/NNNNN.sqlite (and, near-deduping, its
    files' signatures into near/); a file whose cache entry holds its units is not parsed. max_file_bytes: larger
    files are skipped and named in the partition's summary (None: no limit, as `nanodata chunk`). params: ChunkConfig's
    settings by name (nanodata.settings.from_params); reuse: the DAG's Param (False: parse every file again).
    cache_secret: what authenticates the cache's entries and the staged unit stores (the DAG's Variable; None:
    nanodata.storage.auth.load_secret)."""
    secret = load_secret(cache_secret)
    settings = _settings(params, ref, reuse, secret)
    stage = ref["stage"]
    work = _parse_work(stage, settings, params.get("max_file_bytes"), secret)
    with broken_seals(stage):
        totals = _each_partition(stage, ref["batch"], UNITS, work, secret)
    return {"key": ref["key"], "stage": stage, "batch": ref["batch"], **totals}


def _parse_work(stage: str, settings: dict, max_file_bytes: int | None, secret: Secret):
    """work(partition, tmp) -> summary: a partition parsed into its unit store, staged with its seal."""
    from nanodata.pipeline.chunkbuild import graph
    from nanodata.pipeline.chunkbuild.pipeline import Tally

    def work(partition, tmp):
        tally = Tally()
        passed = graph.file_pass(stage, partition["partition"], parts.partition_items(partition, max_file_bytes),
                                 settings, workers=1, tally=tally, tmp=tmp, secret=secret)
        return {**tally.counts(), **passed, "reuse": _used_keys(tally, stage, UNITS, partition["partition"], secret)}

    return work


def _units(stage: str, number: int, path: Path, secret: Secret, reparse) -> Path:
    """A local path of partition `number`'s unit store (the staged file itself when local, else a download to
    `path`), its seal checked. A store whose seal does not hold (edited, moved from another partition or build,
    sealed with another secret) or that is missing is a miss: reparse(number) parses the partition again."""
    uri = units_uri(stage, number)
    local = checked_file(uri, path, secret)
    if local is None:
        reparse(number)
        local = checked_file(uri, path, secret)
        if local is None:
            raise RuntimeError(f"{uri}: parsed again, its seal still does not hold")
    return local


def _parsed(stage: str, number: int, secret: Secret, reparse) -> dict:
    """Partition `number`'s parse summary under its seal; one that is not as sealed is a miss: reparse(number)."""
    uri = item_uri(stage, UNITS, number)
    try:
        summary = read_sealed_json(uri, secret)
    except BrokenSeal as exc:
        log.warning("%s: parsed again", exc)
        reparse(number)
        summary = read_sealed_json(uri, secret)
    if summary is None:
        raise RuntimeError(f"partition {number} is not parsed ({uri} missing)")
    return summary


def _reparser(stage: str, settings: dict | None, max_file_bytes: int | None, secret: Secret, rebuilt: list):
    """reparse(number): a partition parsed again (its summary dropped first, so stage.each_item runs it), noted in
    `rebuilt`. Without chunk settings (settings None) it cannot: a one-line error says so."""
    def reparse(number: int) -> None:
        uri = units_uri(stage, number)
        if settings is None:
            raise NanodataError(f"{uri} fails its seal; give the chunk Params (and cache_secret) to parse it again")
        storage.delete_files([item_uri(stage, UNITS, number)])
        run = _partition_run(stage, UNITS, _parse_work(stage, settings, max_file_bytes, secret), secret)
        for _ in each_item(stage, UNITS, [number], run, secret):
            pass
        rebuilt.append(f"{UNITS}/{item_name(number)}")

    return reparse


def _index_cache(index_uri: str) -> Path:
    import hashlib

    return Path(tempfile.gettempdir()) / "nanodata-index-cache" / hashlib.sha256(index_uri.encode()).hexdigest()[:16]


_CHECKED: dict = {}  # a local index whose seal this process checked -> its (inode, size, mtime): not read again


def _index_path(stage: str, secret: Secret, rebuild, cache: Path | None = None) -> Path:
    """A local path of the build's index, its seal checked: the staged file itself when local, else a copy cached
    on this machine (downloaded once per build and checked, shared by the tasks that run here). An index whose seal
    does not hold, or that is missing, is a miss: rebuild() makes it again."""
    uri = index_uri(stage)
    if not is_gcs(uri):
        info = os.stat(uri) if os.path.isfile(uri) else None
        if info is None or _CHECKED.get(uri) != (info.st_ino, info.st_size, info.st_mtime_ns):
            if checked_file(uri, uri, secret) is None:
                rebuild()
                if checked_file(uri, uri, secret) is None:
                    raise RuntimeError(f"{uri}: made again, its seal still does not hold")
            info = os.stat(uri)
            _CHECKED[uri] = (info.st_ino, info.st_size, info.st_mtime_ns)
        return Path(uri)
    cache = cache or _index_cache(uri)
    local = cache / "index.sqlite"
    if not local.is_file():  # tasks running side by side each download to their own name; the last rename wins
        cache.mkdir(parents=True, exist_ok=True)
        mine = cache / f"index-{os.getpid()}.sqlite"
        if checked_file(uri, mine, secret) is None:
            mine.unlink(missing_ok=True)
            rebuild()
            if checked_file(uri, mine, secret) is None:
                mine.unlink(missing_ok=True)
                raise RuntimeError(f"{uri}: made again, its seal still does not hold")
        os.replace(mine, local)
    return local


def index(planned: dict, reuse: bool = True, cache_secret: Secret | str | None = None, **params) -> list[dict]:
    """Global modes, reduce: every unit store (each store's seal checked) -> index/index.sqlite, sealed. Returns
    the chunk batches. A unit store whose seal does not hold is parsed again, which needs params, reuse and
    cache_secret (as parse_batch's)."""
    stage = planned["stage"]
    secret = load_secret(cache_secret)
    if not planned["parse"] or done_json(summary_uri(stage, INDEX), secret) is not None:
        return planned["chunk"]
    with broken_seals(stage):
        cache = {"cache": read_sealed_json(plan_uri(stage), secret, required=True).get("cache")}
        settings = _settings(params, cache, reuse, secret) if params else None
        rebuilt: list[str] = []
        _make_index(stage, planned["key"], secret, _reparser(stage, settings, params.get("max_file_bytes"), secret,
                                                              rebuilt), rebuilt)
    return planned["chunk"]


def _make_index(stage: str, key: str, secret: Secret, reparse, rebuilt: list) -> None:
    """index/index.sqlite from every partition's unit store (reparse(number) for one that fails its seal, noted in
    `rebuilt`), sealed, then its summary."""
    from nanodata.pipeline.chunkbuild import graph

    plan_ = read_sealed_json(plan_uri(stage), secret, required=True)

    def fetch(number, tmp):
        _parsed(stage, number, secret, reparse)
        return _units(stage, number, tmp / f"{item_name(number)}.sqlite", secret, reparse)

    with _timed(stage, "index", secret):
        counts = graph.make_index(stage, plan_["partitions"], plan_["params"]["mode"], secret, fetch)
    seal_json(summary_uri(stage, INDEX), {"key": key, **counts, "staged_rebuilt": rebuilt}, secret)
    log.info("index of build %s: %d names, %d projects, %d names ambiguous within their project %s", key,
             counts["names"], counts["projects"], counts["ambiguous_names"], counts["ambiguous_by_project"])


def chunk_batch(ref: dict, reuse: bool = True, cache_secret: Secret | str | None = None, **params) -> dict:
    """Map 2: each partition of the batch chunked, its docs scattered by dedupe bucket into scatter/NNNNN.bin (and,
    near-deduping in a local mode, its files' signatures into near/); a file whose cache entry holds its docs is not
    chunked again. params, reuse, cache_secret: as parse_batch's. Global modes: the partition's unit store and the
    index are used only when their seals hold; one that does not is made again here (parsed again; the index
    rebuilt), named in the summary's `staged_rebuilt`."""
    from nanodata.pipeline.chunkbuild import graph
    from nanodata.pipeline.chunkbuild.clangpass import add_resolver
    from nanodata.pipeline.chunkbuild.pipeline import Tally, emit_store
    from nanodata.pipeline.chunkbuild.reuse import with_parse

    secret = load_secret(cache_secret)
    settings = _settings(params, ref, reuse, secret)
    mode, max_file_bytes = settings["mode"], params.get("max_file_bytes")
    stage = ref["stage"]

    def work(partition, tmp):
        name = item_name(partition["partition"])
        out = tmp / (name + STAGED)
        tally = Tally()
        signed: dict = {}  # local modes: the file pass's near-dedup counts
        read_by_parse: dict = {}
        if mode in GLOBAL_MODES:
            rebuilt: list[str] = []
            reparse = _reparser(stage, settings, max_file_bytes, secret, rebuilt)

            def rebuild_index():
                storage.delete_files([summary_uri(stage, INDEX)])
                _make_index(stage, ref["key"], secret, reparse, [])
                rebuilt.append(f"{INDEX}/index.sqlite")

            parsed = _parsed(stage, partition["partition"], secret, reparse)
            store = _units(stage, partition["partition"], tmp / "units.sqlite", secret, reparse)
            groups = emit_store(store, _index_path(stage, secret, rebuild_index), settings, 1, out, tally)
            # the files were read (their problems counted, the dropped ones named) by the parse pass
            read_by_parse = {k: parsed[k] for k in ("files_skipped", "files_failed", "problems", "files_too_big",
                                                    "too_big", "files_dropped", "cleaning") if k in parsed}
            read_by_parse["reuse"] = with_parse(tally.reuse.to_dict(), parsed.get("reuse", {}))
            for project, figures in parsed.get("resolver", {}).items():  # --resolver clang: the files beside the pulls
                add_resolver(tally.resolver, project, figures)
            read_by_parse["staged_rebuilt"] = rebuilt
        else:
            signed = graph.file_pass(stage, partition["partition"], parts.partition_items(partition, max_file_bytes),
                                     settings, workers=1, tally=tally, tmp=tmp, secret=secret, docs=out)
            groups = signed.pop("groups")
        buckets = read_sealed_json(plan_uri(stage), secret, required=True)["buckets"]
        scattered = tail.scatter(out, groups, buckets, item_uri(stage, tail.SCATTER, partition["partition"], ".bin"),
                                 tmp, secret)
        reuse_counts = _used_keys(tally, stage, DOCS, partition["partition"], secret)
        return {**tally.counts(), "reuse": reuse_counts, **read_by_parse, **scattered, **signed}

    with broken_seals(stage):
        totals = _each_partition(stage, ref["batch"], DOCS, work, secret)
    return {"key": ref["key"], "stage": stage, "batch": ref["batch"], **totals}


def route(stage: str, key: str, *, rows_per_file: int, shard_mb: float, val_fraction: float,
          cache_secret: Secret | str | None = None) -> list[dict]:
    """After chunk and near (unmapped): near-dedup settled (settle), then the tail's settings recorded (reading
    nothing but plan.json); the bucket batches to map. The shards are sized after the buckets (shard_refs).
    cache_secret: as plan's (so for every step below)."""
    secret = load_secret(cache_secret)
    with broken_seals(stage):
        settle(stage, key, secret)
        with _timed(stage, "route", secret):
            return tail.route(stage, key, rows_per_file=rows_per_file, shard_bytes=int(shard_mb * (1 << 20)),
                              val_fraction=val_fraction, secret=secret)


def bucket_batch(ref: dict, cache_secret: Secret | str | None = None) -> dict:
    from nanodata.pipeline.dedup.near import load_removed

    stage, secret = ref["stage"], load_secret(cache_secret)
    removed = None
    with broken_seals(stage):
        if read_sealed_json(plan_uri(stage), secret, required=True).get("near"):
            if sealed(near_summary_uri(stage), secret) is None:  # written last by settle
                raise RuntimeError(f"near-dedup of build {ref['key']} is not settled ({near_summary_uri(stage)} missing)")
            removed = load_removed(near_uri(stage), secret)
        return tail.bucket_batch(ref, seed=SEED, removed=removed, secret=secret)


def shard_refs(stage: str, key: str, cache_secret: Secret | str | None = None) -> list[dict]:
    with broken_seals(stage):
        return tail.shard_refs(stage, key, load_secret(cache_secret))


def shard_batch(dest: str, ref: dict, *, tokenizer: str, cache_secret: Secret | str | None = None) -> dict:
    with broken_seals(ref["stage"]):
        return tail.shard_batch(ref, build=build_uri(dest, ref["key"]), seed=SEED, tokenizer=tokenizer,
                                secret=load_secret(cache_secret))


def publish(dest: str, stage: str, key: str, cache_secret: Secret | str | None = None) -> dict:
    """The commit, unmapped bookkeeping: manifest.json and _COMPLETE (from the shard tasks' summaries), then
    latest.json, written last. Returns the build's URI, Params and counts for the Asset event (the reports
    plugin lists builds from these events)."""
    from nanodata import __version__

    target, secret = build_uri(dest, key), load_secret(cache_secret)
    with broken_seals(stage), _timed(stage, "publish", secret):
        manifest = tail.commit(target, stage, f"nanodata {__version__} nanodata_cpp_corpus", secret)
        planned = read_sealed_json(plan_uri(stage), secret, required=True)
        buckets = tail.bucket_stats(stage, secret)
        reuse = reuse_stats(partition_summaries(stage, secret)[1])
        near_removed = (read_sealed_json(near_summary_uri(stage), secret) or {}).get("files_removed", 0)
        val_tokens = _val_tokens(stage, secret)
    info = {"key": key, "uri": target, "params": planned.get("params"), "docs": manifest.total_rows,
            "tokens": sum(s.tokens or 0 for s in manifest.shards) + val_tokens,
            "shards": len(manifest.files), "bytes": sum(s.bytes for s in manifest.files),
            "duplicates_dropped": sum(b["duplicates"] or 0 for b in buckets),
            "near_docs_removed": sum(b.get("near_removed") or 0 for b in buckets),
            "near_files_removed": near_removed,
            "reuse": {k: v for k, v in reuse.items() if k != "by_project"}}
    latest = read_latest(dest)
    if latest is None or latest.key != key:
        published = {k: v for k, v in info.items() if k not in ("key", "uri")}
        write_latest(dest, Latest(key=key, uri=target, info={
            **published, "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    return info


def _val_tokens(stage: str, secret: Secret) -> int:
    last = read_sealed_json(join(stage, tail.SHARD_PLAN), secret, required=True)["shards"]
    files = read_sealed_json(item_uri(stage, tail.SHARDS, last), secret, required=True).get("files") or []
    return sum(f["tokens"] or 0 for f in files)


def cleanup(dest: str, key: str, cache_keep_runs: int = CACHE_KEEP.default,
            cache_grace_hours: float = CACHE_GRACE_HOURS.default, cache_secret: Secret | str | None = None) -> dict:
    """Once the build is committed (latest.json points at it): record the cache keys it used and delete the cache
    entries none of the last `cache_keep_runs` builds used (once older than `cache_grace_hours`: a younger one may be
    a build's still going), then delete its staging, every partition size's, and
    this machine's cached index copies. A failed build never gets here, so a retry resumes from staging. A keys
    file not as sealed is left out (logged): its entries may then be deleted, a colder cache, never a wrong
    corpus."""
    from nanodata.storage.entries import EntryStore

    CACHE_KEEP.check("cache_keep_runs", cache_keep_runs)
    latest = read_latest(dest)
    if latest is None or latest.key != key or not is_complete(build_uri(dest, key)):
        raise RuntimeError(f"build {key} is not committed: its staging is kept")
    staging = staging_uri(dest, key)
    names = storage.list_names(staging)
    for name in names:  # this machine's cached copies of the build's indexes
        if name.endswith(f"/{INDEX}/index.sqlite"):
            shutil.rmtree(_index_cache(join(staging, name)), ignore_errors=True)
    store = EntryStore(cache_uri(dest))
    used = b"".join(_used(join(staging, name), load_secret(cache_secret)) for name in names
                    if f"/{REUSE}/" in name and not name.endswith(MAC_SUFFIX))
    # named by the publish time (a retried cleanup records the same name), so records sort by age
    stamp = str(latest.info.get("published_at", "")).replace(":", "").replace("-", "")
    store.record_use(f"{stamp}-{key}", used)
    cache = store.retain(cache_keep_runs, cache_grace_hours)
    removed = storage.delete_tree(staging)
    if not is_gcs(dest):  # the .staging directory itself, once no other build's staging is in it
        with contextlib.suppress(OSError):
            os.rmdir(join(dest, ".staging"))
    log.info("build %s committed: removed %s staging files; cache: %s entries (%s bytes) kept for the last %d builds, "
             "%s deleted", key, f"{removed:,}", f"{cache['entries']:,}", f"{cache['bytes']:,}", cache["builds_kept"],
             f"{cache['entries_deleted']:,}")
    return {"key": key, "removed": removed, "cache": cache}


def _used(uri: str, secret: Secret) -> bytes:
    """A reuse keys file's keys under its seal; none (logged) when it is not as sealed."""
    try:
        return read_sealed(uri, secret, required=True)
    except BrokenSeal as exc:
        log.warning("%s: its cache keys are not recorded", exc)
        return b""


@contextlib.contextmanager
def _timed(stage: str, step: str, secret: Secret):
    """Record an unmapped step's seconds (timings/STEP.json) for the report's task table."""
    started = time.perf_counter()
    yield
    uri = timing_uri(stage, step)
    if done_json(uri, secret) is None:  # the first run's time: a re-run that found the work done writes nothing
        seal_json(uri, {"seconds": round(time.perf_counter() - started, 3)}, secret)


def partition_summaries(stage: str, secret: Secret | str | None = None) -> tuple[dict, list[dict]]:
    """The plan and every partition's chunk summary (read at once, under their seals; {} for one not written),
    which the report's partition, fidelity and too-big sections all read. secret: as plan's cache_secret."""
    secret = load_secret(secret)
    plan_ = read_sealed_json(plan_uri(stage), secret) or {"partitions": 0}
    summaries = read_sealed_jsons(item_uris(stage, DOCS, plan_["partitions"]), secret)
    return plan_, [s or {} for s in summaries]


def reuse_stats(summaries: list[dict], cache: str | None = None) -> dict:
    """Files reused from the cache or chunked, with their bytes and the corrupt entries rebuilt: in total and per
    project (the chunk tasks' counts), and the cache's size now when `cache` (its URI) is given."""
    from nanodata.pipeline.chunkbuild.reuse import merge, totals
    from nanodata.storage.entries import EntryStore

    by_project = merge(s.get("reuse", {}) for s in summaries)
    return {**totals(by_project), "by_project": by_project,
            **({"cache": {"uri": cache, **EntryStore(cache).size()}} if cache else {})}
