"""What a corpus DAG build's report shows besides its shards, read from the build's staging: time per task kind,
each partition's counts, each bucket's dedupe counts, the names ambiguous per project, fidelity, cleaning,
near-dedup, reuse and the files over max_file_bytes. Every file is read under its seal (nanodata.storage.auth); the
shard tasks' own statistics come from nanodata.jobs.tail, so the report reads no shard."""

from __future__ import annotations

from nanodata.jobs import tail
from nanodata.jobs.cpp_corpus import partition_summaries, reuse_stats
from nanodata.pipeline.chunkbuild.stage import (
    DOCS,
    INDEX,
    UNITS,
    broken_seals,
    item_uris,
    near_summary_uri,
    near_uri,
    plan_uri,
    summary_uri,
    timing_uri,
)
from nanodata.storage import join_uri as join
from nanodata.storage.auth import Secret, load_secret, read_sealed_json, read_sealed_jsons


def task_times(stage: str, secret: Secret) -> list[dict]:
    """[{"task", "mapped", "instances", "seconds"}]: the mapped steps' per-item seconds summed (from their
    summaries), the unmapped steps' recorded seconds. Only time the steps spent working is counted."""
    plan_ = read_sealed_json(plan_uri(stage), secret) or {"partitions": 0}
    tail_ = {"buckets": 0, **(read_sealed_json(join(stage, tail.TAIL), secret) or {}),
             "shards": (read_sealed_json(join(stage, tail.SHARD_PLAN), secret) or {"shards": -1})["shards"]}
    mapped = {"parse": item_uris(stage, UNITS, plan_["partitions"]),
              "chunk": item_uris(stage, DOCS, plan_["partitions"]),
              "near": item_uris(near_uri(stage), "edges", (plan_.get("near") or {}).get("groups", 0)),
              "bucket": item_uris(stage, tail.ROUTED, tail_["buckets"]),
              "shard": item_uris(stage, tail.SHARDS, tail_["shards"] + 1)}
    rows = []
    for step in ("plan", "parse", "index", "chunk", "near", "settle", "route", "bucket", "shard", "publish"):
        if step in mapped:
            seconds = [s["seconds"] for s in read_sealed_jsons(mapped[step], secret) if s is not None]
            if seconds:
                rows.append({"task": step, "mapped": True, "instances": len(seconds), "seconds": round(sum(seconds), 3)})
        else:
            timing = read_sealed_json(timing_uri(stage, step), secret)
            if timing is not None:
                rows.append({"task": step, "mapped": False, "instances": 1, "seconds": timing["seconds"]})
    return rows


def partition_stats(summaries: list[dict]) -> list[dict]:
    """Per partition, what its chunk task counted (for the report)."""
    return [{k: s.get(k) for k in ("partition", "files_read", "bytes_read", "files_skipped", "files_failed", "docs",
                                   "tokens", "doc_bytes", "seconds", "mb_per_s")} for s in summaries]


def ambiguity(stage: str, secret: Secret) -> dict | None:
    """Global modes: names defined more than once with one qualification within a project, per project (the
    index's counts); None in local modes."""
    counts = read_sealed_json(summary_uri(stage, INDEX), secret)
    return None if counts is None else {k: counts[k] for k in ("ambiguous_names", "ambiguous_by_project")}


def fidelity_stats(summaries: list[dict]) -> dict | None:
    """The chunk tasks' fidelity figures (lines kept, balanced docs, cuts) summed per project, or None."""
    from nanodata.pipeline.chunking.fidelity import add_stats, summarize

    by_project: dict = {}
    for summary in summaries:
        for project, stats in summary.get("fidelity", {}).items():
            add_stats(by_project, project, stats)
    return summarize(by_project) if by_project else None


def report_extras(stage: str, cache_secret: Secret | str | None = None) -> dict:
    """What the build's report shows (nanodata.report.corpus_report.report_build): each shard's statistics (the
    shard tasks computed them: the report reads no shard), each partition's counts, time per task kind, each
    bucket's dedupe counts, the names ambiguous per project (global modes), the chunks' fidelity per project, and
    (--resolver clang) how each project's files were resolved.
    All of it read under its seal (cache_secret: as plan's)."""
    secret = load_secret(cache_secret)
    with broken_seals(stage):
        plan_, summaries = partition_summaries(stage, secret)
        buckets = tail.bucket_stats(stage, secret)
        return {"shards": tail.file_stats(stage, secret), "partitions": partition_stats(summaries),
                "tasks": task_times(stage, secret), "buckets": buckets, "ambiguity": ambiguity(stage, secret),
                "fidelity": fidelity_stats(summaries), "too_big": too_big_files(plan_, summaries),
                "near_duplicates": near_duplicates(stage, buckets, secret), "cleaning": cleaning_stats(summaries),
                "reuse": reuse_stats(summaries, plan_.get("cache")), "clang": clang_stats(summaries)}


def clang_stats(summaries: list[dict]) -> dict | None:
    """--resolver clang: per project, the files resolved by clang or by names (why), references bound, and pulls
    against names, summed over the chunk tasks' summaries; None when no file went through clang's pass."""
    from nanodata.pipeline.chunkbuild.clangpass import add_resolver

    by_project: dict = {}
    for summary in summaries:
        for project, figures in summary.get("resolver", {}).items():
            add_resolver(by_project, project, figures)
    return by_project or None


def cleaning_stats(summaries: list[dict]) -> dict | None:
    """What cleaning dropped, redacted and found (licenses) per project, summed over the chunk tasks' summaries."""
    from nanodata.pipeline.cleaning.tally import summarize

    parts = [s["cleaning"] for s in summaries if "cleaning" in s]
    return summarize(parts) if parts else None


def near_duplicates(stage: str, buckets: list[dict], secret: Secret) -> dict | None:
    """The near-dedup summary (settle's), with the docs the bucket tasks dropped for it; None without near-dedup."""
    summary = read_sealed_json(near_summary_uri(stage), secret)
    if summary is None:
        return None
    return {**summary, "docs_removed": sum(b.get("near_removed") or 0 for b in buckets)}


def too_big_files(plan_: dict, summaries: list[dict]) -> dict | None:
    """The files the build skipped for its max_file_bytes, from the partitions' summaries, as the report shows
    them ({"max_file_bytes", "files", "listed": the first TOO_BIG_KEPT}); None when the build set no limit."""
    from nanodata.pipeline.chunkbuild.pipeline import TOO_BIG_KEPT

    limit = plan_.get("params", {}).get("max_file_bytes")
    if limit is None:
        return None
    listed = [entry for s in summaries for entry in s.get("too_big", [])][:TOO_BIG_KEPT]
    return {"max_file_bytes": limit, "files": sum(s.get("files_too_big", 0) for s in summaries), "listed": listed}
