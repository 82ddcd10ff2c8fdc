"""The C++ corpus build: plan → [parse (mapped) → index] → chunk (mapped) → merge → to-parquet → upload
→ publish → report.

`plan` cuts the inputs into partitions of about `partition_mb` MB (nanodata.pipeline.chunking.partitions);
every other step works on partitions or on their staged results, so any number of workers can
take the mapped tasks and the corpus is byte-identical however it was cut. Global modes
(cross-file, project, compilable) first parse each partition into a unit store, reduce the stores
to one index, then emit; local modes emit straight away (parse and index have nothing to do).

Each step reads its inputs from and writes its outputs to the run's stage
(DEST/.staging/<key>/s<STAGE_FORMAT>-p<partition_mb>/; the final build goes to DEST/builds/<key>/), writes a
partition's summary after its data, and first returns the recorded result when it is there:
re-running any step, or the whole build, redoes nothing that finished.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path

from nanodata import storage
from nanodata.pipeline.chunking import partitions as parts
from nanodata.pipeline.chunking.modes import GLOBAL_MODES
from nanodata.pipeline.chunking.sources import CPP_EXTENSIONS
from nanodata.dataset import COMPLETE, MANIFEST
from nanodata.jobs import MAX_MAPPED_TASKS
from nanodata.ranges import PARTITION_MB
from nanodata.jobs.inputs import batch_bounds, build_key, list_inputs, staging_uri
from nanodata.storage import fetch_dir, is_gcs, join_uri as join, put_dir, read_json, write_json

log = logging.getLogger(__name__)

LATEST = "latest.json"
PLAN = "plan.json"        # what plan() decided: inputs, hashes, partitions, batch bounds; written last
DOCS = "docs.jsonl"
STAGED = ".staged"        # a partition's docs as staged lines (see writer.staged_line), not plain JSONL
SUMMARY = "summary.json"  # written after a step's big output: its presence means the step finished
SEED = 42  # parquet shuffle seed: fixed, so a build is a pure function of its key
DEFAULT_PARTITION_MB = 256
MAX_FILE_BYTES = 500_000  # as `nanodata chunk`'s default
# bump when what the steps stage changes: a build an older version left half done then starts a fresh
# stage instead of merging files it cannot read (its key, hence finished builds, stay the same)
STAGE_FORMAT = 2


def build_uri(dest: str, key: str) -> str:
    return join(dest, "builds", key)


def stage_uri(dest: str, key: str, partition_mb: float) -> str:
    """Partitioned intermediates of build <key>: one stage per partition size and STAGE_FORMAT, never mixed."""
    return join(staging_uri(dest, key), f"s{STAGE_FORMAT}-p{partition_mb:g}")


def _partition_name(number: int) -> str:
    return f"{number:05d}"


def plan(source: str, dest: str, params: dict, partition_mb: float = DEFAULT_PARTITION_MB,
         max_batches: int = MAX_MAPPED_TASKS) -> dict:
    """List and hash the inputs, cut them into partitions; return the mapped tasks' batches:
    {"key", "stage", "parse": [...], "chunk": [...]} (parse is empty in local modes; both are empty
    when the build is up to date).

    Up to date = this key's build is complete and latest.json already points at it: nothing to do,
    nothing written. A complete build that latest.json does not point at (inputs reverted to an
    earlier state) goes through the steps again, which find their outputs and only re-publish.
    """
    PARTITION_MB.check("partition_mb", partition_mb)  # the DAG Param's range and `nanodata chunk --partition-mb`'s
    inputs = list_inputs(source)
    key = build_key(inputs, params)
    stage = stage_uri(dest, key, partition_mb)
    latest = read_json(join(dest, LATEST)) or {}
    if storage.exists(join(build_uri(dest, key), COMPLETE)) and latest.get("key") == key:
        log.info("build %s is up to date (%d inputs unchanged): nothing to do", key, len(inputs))
        return {"key": key, "stage": stage, "parse": [], "chunk": []}
    planned = read_json(join(stage, PLAN))
    if planned is None:
        n = parts.plan_partitions(inputs, stage, int(partition_mb * 2 ** 20), CPP_EXTENSIONS)
        planned = {"source": source, "params": params, "partition_mb": partition_mb, "inputs": inputs,
                   "partitions": n, "batches": batch_bounds(n, max_batches)}
        write_json(join(stage, PLAN), planned)
    log.info("build %s: %d inputs in %d partitions of <= %g MB, %d batches", key, len(inputs),
             planned["partitions"], partition_mb, len(planned["batches"]))
    refs = [{"key": key, "stage": stage, "batch": b} for b in range(len(planned["batches"]))]
    return {"key": key, "stage": stage, "parse": refs if params["mode"] in GLOBAL_MODES else [], "chunk": refs}


def _batch_partitions(stage: str, batch: int) -> list[int]:
    start, stop = read_json(join(stage, PLAN))["batches"][batch]
    return list(range(start, stop))


def _settings(mode: str, max_tokens: int, tokenizer: str) -> dict:
    from nanodata.pipeline.chunking.pipeline import check_settings

    return check_settings(mode, max_tokens, tokenizer)


def _each_partition(stage: str, batch: int, kind: str, work) -> dict:
    """Run work(partition, tmp dir) -> summary for each partition of a batch not yet done; the summary
    (kind/NNNNN.json) is written after the partition's data. Returns the batch's totals."""
    totals: dict = {"partitions": 0, "files_read": 0, "bytes_read": 0, "files_skipped": 0, "files_failed": 0,
                    "docs": 0, "tokens": 0}
    for number in _batch_partitions(stage, batch):
        summary_uri = join(stage, kind, _partition_name(number) + ".json")
        summary = read_json(summary_uri)
        if summary is None:
            partition = parts.load_partition(stage, number)
            log.info("%s %s", kind, parts.describe(partition))
            started = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix=f"nanodata-{kind}-") as tmp:
                summary = work(partition, Path(tmp))
            seconds = time.perf_counter() - started
            summary.update(partition=number, seconds=round(seconds, 3),
                           mb_per_s=round(summary["bytes_read"] / seconds / 1e6, 3) if seconds else 0.0)
            write_json(summary_uri, summary)
            log.info("%s partition %d: %d files read (%.1f MB), %d skipped, %d failed, %d docs, %d tokens, "
                     "%.1f s, %.2f MB/s", kind, number, summary["files_read"], summary["bytes_read"] / 1e6,
                     summary["files_skipped"], summary["files_failed"], summary["docs"], summary["tokens"],
                     seconds, summary["mb_per_s"])
        totals["partitions"] += 1
        for name in totals:
            if name != "partitions":
                totals[name] += summary[name]
    return totals


def parse_batch(ref: dict, *, mode: str, max_tokens: int, tokenizer: str) -> dict:
    """Global modes, map 1: each partition of the batch parsed into units/NNNNN.sqlite."""
    from nanodata.pipeline.chunking.pipeline import Tally, parse_items

    settings = _settings(mode, max_tokens, tokenizer)
    stage = ref["stage"]

    def work(partition, tmp):
        store = tmp / "units.sqlite"
        tally = Tally()
        parse_items(parts.partition_items(partition, MAX_FILE_BYTES), settings, 1, store, tally)
        storage.write_file(store, join(stage, "units", _partition_name(partition["partition"]) + ".sqlite"))
        return tally.counts()

    return {"key": ref["key"], "stage": stage, "batch": ref["batch"], **_each_partition(stage, ref["batch"], "units", work)}


def _index_path(stage: str, cache: Path | None = None) -> Path:
    """A local path of the build's index: the staged file itself when local, else a copy cached on this
    machine (downloaded once per build, shared by the tasks that run here)."""
    uri = join(stage, "index", "index.sqlite")
    if not is_gcs(uri):
        return Path(uri)
    import hashlib

    cache = cache or Path(tempfile.gettempdir()) / "nanodata-index-cache" / hashlib.sha256(uri.encode()).hexdigest()[:16]
    local = cache / "index.sqlite"
    if not local.is_file():  # tasks running side by side each download to their own name; the last rename wins
        cache.mkdir(parents=True, exist_ok=True)
        mine = storage.local_copy(uri, cache / f"index-{os.getpid()}.sqlite")
        os.replace(mine, local)
    return local


def index(planned: dict) -> list[dict]:
    """Global modes, reduce: every unit store -> index/index.sqlite. Returns the chunk batches."""
    from nanodata.pipeline.chunking.globalindex import build_index

    stage = planned["stage"]
    if not planned["parse"] or read_json(join(stage, "index", SUMMARY)) is not None:
        return planned["chunk"]
    plan_ = read_json(join(stage, PLAN))
    with tempfile.TemporaryDirectory(prefix="nanodata-index-") as tmp:
        tmp = Path(tmp)

        def fetch(number):
            name = _partition_name(number)
            if read_json(join(stage, "units", name + ".json")) is None:
                raise RuntimeError(f"partition {number} of build {planned['key']} is not parsed "
                                   f"({stage}/units/{name}.json missing)")
            return storage.local_copy(join(stage, "units", name + ".sqlite"), tmp / f"{name}.sqlite")

        def release(number):
            if is_gcs(stage):
                (tmp / f"{_partition_name(number)}.sqlite").unlink(missing_ok=True)

        local_index = tmp / "index.sqlite"
        counts = build_index(range(plan_["partitions"]), local_index, plan_["params"]["mode"], tmp, fetch, release)
        storage.write_file(local_index, join(stage, "index", "index.sqlite"))
    write_json(join(stage, "index", SUMMARY), {"key": planned["key"], **counts})
    log.info("index of build %s: %d names, %d projects", planned["key"], counts["names"], counts["projects"])
    return planned["chunk"]


def chunk_batch(ref: dict, *, mode: str, max_tokens: int, tokenizer: str) -> dict:
    """Map 2: each partition of the batch chunked into docs/NNNNN.staged (staged lines, in merge groups)."""
    from nanodata.pipeline.chunking.pipeline import Tally, chunk_items, emit_store, stage_docs

    settings = _settings(mode, max_tokens, tokenizer)
    stage = ref["stage"]

    def work(partition, tmp):
        name = _partition_name(partition["partition"])
        out = tmp / (name + STAGED)
        tally = Tally()
        if mode in GLOBAL_MODES:
            store = storage.local_copy(join(stage, "units", name + ".sqlite"), tmp / "units.sqlite")
            parsed = read_json(join(stage, "units", name + ".json"))
            groups = emit_store(store, _index_path(stage), settings, 1, out, tally)
            # the files were read (and their problems counted) by the parse pass
            tally.files_skipped, tally.files_failed, tally.problems = (parsed["files_skipped"], parsed["files_failed"],
                                                                       parsed["problems"])
        else:
            docs = chunk_items(parts.partition_items(partition, MAX_FILE_BYTES), settings, 1, tally)
            groups = stage_docs(docs, out, mode)
        storage.write_file(out, join(stage, "docs", name + STAGED))
        return {**tally.counts(), "groups": groups}

    return {"key": ref["key"], "stage": stage, "batch": ref["batch"], **_each_partition(stage, ref["batch"], "docs", work)}


def merge(stage: str, key: str) -> dict:
    """Concatenate every partition's docs in (rank, partition) order, dropping exact duplicate texts
    (the first copy is kept): the same writer, so the same bytes, as one `nanodata chunk` run."""
    from nanodata.pipeline.chunking.pipeline import merge_docs
    from nanodata.pipeline.chunking.writer import JsonlWriter

    out_uri = join(stage, "merged")
    done = read_json(join(out_uri, SUMMARY))
    if done is not None:
        return done
    plan_ = read_json(join(stage, PLAN))
    summaries = []
    for number in range(plan_["partitions"]):
        summary = read_json(join(stage, "docs", _partition_name(number) + ".json"))
        if summary is None:
            raise RuntimeError(f"partition {number} of build {key} is not chunked "
                               f"({stage}/docs/{_partition_name(number)}.json missing)")
        summaries.append(summary)
    with tempfile.TemporaryDirectory(prefix="nanodata-merge-") as tmp:
        tmp = Path(tmp)
        # a local stage gets the merged file in place (the writer renames it there when complete): a copy
        # would be one more serial pass over the whole corpus
        up = tmp / "up" if is_gcs(out_uri) else Path(out_uri)
        writer = JsonlWriter(up / DOCS, plan_["params"]["mode"])

        def open_part(uri):  # downloaded once, deleted after its last range: disk holds what is still needed
            local = tmp / uri.rsplit("/", 1)[-1]
            return open(local if local.is_file() else storage.local_copy(uri, local), "rb")

        def release(uri):
            if is_gcs(uri):
                (tmp / uri.rsplit("/", 1)[-1]).unlink(missing_ok=True)

        try:
            merge_docs([(s["partition"], join(stage, "docs", _partition_name(s["partition"]) + STAGED), s["groups"])
                        for s in summaries], writer, open_part, release)
        except BaseException:
            writer.abort()
            raise
        per_partition = [{k: s[k] for k in ("partition", "files_read", "bytes_read", "files_skipped", "files_failed",
                                            "docs", "tokens", "seconds", "mb_per_s")} for s in summaries]
        result = {"key": key, "docs": writer.docs, "tokens": writer.tokens, "duplicates_dropped": writer.duplicates,
                  "modes": {plan_["params"]["mode"]: writer.docs}, "partitions": per_partition}
        writer.commit(result)
        (up / (DOCS + ".done")).unlink()
        if is_gcs(out_uri):
            put_dir(up, out_uri)
    write_json(join(out_uri, SUMMARY), result)
    return result


def to_parquet(stage: str, key: str, *, rows_per_file: int, val_fraction: float) -> dict:
    """Shuffled parquet shards + manifest + _COMPLETE into the stage's parquet/."""
    from nanodata.pipeline.to_parquet import jsonl_to_parquet

    parquet_uri = join(stage, "parquet")
    if storage.exists(join(parquet_uri, COMPLETE)):
        manifest = read_json(join(parquet_uri, MANIFEST))
    else:
        with tempfile.TemporaryDirectory(prefix="nanodata-parquet-") as tmp:
            merged = fetch_dir(join(stage, "merged"), Path(tmp) / "merged") / DOCS
            manifest = jsonl_to_parquet([str(merged)], Path(tmp) / "parquet", rows_per_file=rows_per_file,
                                        val_fraction=val_fraction, seed=SEED)
            put_dir(Path(tmp) / "parquet", parquet_uri)
    return {"key": key, "rows": manifest["total_rows"], "shards": len(manifest["shards"]) + bool(manifest.get("val"))}


def upload(dest: str, stage: str, key: str) -> dict:
    """Copy the staged shards to builds/<key>/: shards, then manifest.json, then _COMPLETE."""
    target = build_uri(dest, key)
    if storage.exists(join(target, COMPLETE)):
        return {"key": key, "uri": target, "uploaded": 0}
    with tempfile.TemporaryDirectory(prefix="nanodata-upload-") as tmp:
        local = fetch_dir(join(stage, "parquet"), Path(tmp))
        result = put_dir(local, target)
    return {"key": key, "uri": target, "uploaded": result["uploaded"]}


def publish(dest: str, stage: str, key: str) -> dict:
    """Point latest.json at the finished build; returns its URI, build Params and counts for the Asset event
    (the reports plugin lists builds from these events)."""
    target = build_uri(dest, key)
    if not storage.exists(join(target, COMPLETE)):
        raise RuntimeError(f"{target}: no {COMPLETE}; the upload did not finish")
    manifest = read_json(join(target, MANIFEST))
    merged = read_json(join(stage, "merged", SUMMARY)) or {}
    planned = read_json(join(stage, PLAN)) or {}
    shards = manifest["shards"] + ([manifest["val"]] if manifest.get("val") else [])
    info = {"key": key, "uri": target, "params": planned.get("params"), "docs": manifest["total_rows"],
            "tokens": merged.get("tokens"),
            "shards": len(shards), "bytes": sum(s["bytes"] for s in shards),
            "duplicates_dropped": merged.get("duplicates_dropped")}
    latest_uri = join(dest, LATEST)
    if (read_json(latest_uri) or {}).get("key") != key:
        write_json(latest_uri, {**info, "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return info


def report(dest: str, key: str, tokenizer: str = "cl100k_base", stage: str | None = None,
           max_tokens: int | None = None) -> str:
    """Write the build report next to the shards (builds/<key>/report/); returns its index.html URI.
    With the build's stage, the report also shows what each partition's chunk task counted; with the
    build's max_tokens, its length histogram ends there and its crop table adds T = max_tokens."""
    from nanodata.report.corpus_report import INDEX_HTML, PLOTS, REPORT_DIR, REPORT_JSON, write_report

    target = build_uri(dest, key)
    report_uri = join(target, REPORT_DIR)
    if all(storage.exists(join(report_uri, name)) for name in (REPORT_JSON, INDEX_HTML, *PLOTS)):
        return join(report_uri, INDEX_HTML)
    partitions = ((read_json(join(stage, "merged", SUMMARY)) or {}).get("partitions") if stage else None)
    if not is_gcs(target):
        return str(write_report(target, tokenizer=tokenizer, partitions=partitions, max_tokens=max_tokens))
    with tempfile.TemporaryDirectory(prefix="nanodata-report-") as tmp:
        local = fetch_dir(target, Path(tmp) / "build")
        index = write_report(local, Path(tmp) / REPORT_DIR, tokenizer=tokenizer, partitions=partitions,
                             max_tokens=max_tokens, uri=target)  # the report names the build, not this copy
        put_dir(index.parent, report_uri)
    return join(report_uri, INDEX_HTML)
