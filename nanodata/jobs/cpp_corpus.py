"""The C++ corpus build: plan → chunk (per batch) → merge → to-parquet → upload → publish → report.

Each step reads its inputs from and writes its outputs to DEST/.staging/<key>/ (the final
build goes to DEST/builds/<key>/), and first returns its recorded result when that output is
already there: re-running any step, or the whole build, redoes nothing that finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from nanodata import storage
from nanodata.dataset import COMPLETE, MANIFEST
from nanodata.jobs import MAX_MAPPED_TASKS
from nanodata.jobs.inputs import batch_bounds, build_key, list_inputs, staging_uri
from nanodata.jobs.store import fetch_dir, is_gcs, join, put_dir, read_json, write_json

log = logging.getLogger(__name__)

LATEST = "latest.json"
INPUTS = "inputs.json"  # the listing plan() made: inputs, hashes, batch bounds
DOCS = "docs.jsonl"
SUMMARY = "summary.json"  # written after a step's big output: its presence means the step finished
SEED = 42  # parquet shuffle seed: fixed, so a build is a pure function of its key


def build_uri(dest: str, key: str) -> str:
    return join(dest, "builds", key)


def _staged(dest: str, key: str, *parts: str) -> str:
    return join(staging_uri(dest, key), *parts)


def plan(source: str, dest: str, params: dict, max_batches: int = MAX_MAPPED_TASKS) -> list[dict]:
    """List and hash the inputs; return one {"key", "batch"} per chunk batch, or [] when up to date.

    Up to date = this key's build is complete and latest.json already points at it: nothing to do,
    nothing written. A complete build that latest.json does not point at (inputs reverted to an
    earlier state) goes through the steps again, which find their outputs and only re-publish.
    """
    inputs = list_inputs(source)
    key = build_key(inputs, params)
    latest = read_json(join(dest, LATEST)) or {}
    if storage.exists(join(build_uri(dest, key), COMPLETE)) and latest.get("key") == key:
        log.info("build %s is up to date (%d inputs unchanged): nothing to do", key, len(inputs))
        return []
    # project mode orders whole projects by their #includes: it must see every project in one run
    bounds = batch_bounds(len(inputs), 1 if params["mode"] == "project" else max_batches)
    if read_json(_staged(dest, key, INPUTS)) is None:
        write_json(_staged(dest, key, INPUTS), {"source": source, "params": params, "inputs": inputs,
                                                "batches": bounds})
    log.info("build %s: %d inputs in %d batches", key, len(inputs), len(bounds))
    return [{"key": key, "batch": b} for b in range(len(bounds))]


def chunk_batch(dest: str, key: str, batch: int, *, mode: str, max_tokens: int, tokenizer: str) -> dict:
    """Chunk one batch of inputs into .staging/<key>/chunks/NNNNN/docs.jsonl; returns its summary."""
    from nanodata.chunking import chunk_to_jsonl

    out_uri = _staged(dest, key, "chunks", f"{batch:05d}")
    done = read_json(join(out_uri, SUMMARY))
    if done is not None:  # the summary is written after docs.jsonl, so this batch is finished
        return done
    listing = read_json(_staged(dest, key, INPUTS))
    start, stop = listing["batches"][batch]
    entries = listing["inputs"][start:stop]
    with tempfile.TemporaryDirectory(prefix="nanodata-chunk-") as tmp:
        tmp = Path(tmp)
        jsonl = [str(_fetch_file(e["uri"], tmp / "in" / str(i))) for i, e in enumerate(entries) if e["kind"] == "jsonl"]
        projects = _project_roots([e for e in entries if e["kind"] == "project"], listing["source"], mode, tmp / "in")
        work, up = tmp / "work", tmp / "up"
        work.mkdir()
        up.mkdir()
        summary = chunk_to_jsonl(work / DOCS, inputs=jsonl, project_dirs=projects, mode=mode, max_tokens=max_tokens,
                                 tokenizer=tokenizer, workers=1)
        (work / DOCS).rename(up / DOCS)  # without the chunker's .done marker
        put_dir(up, out_uri)
    result = {"key": key, "batch": batch, "inputs": len(entries),
              **{k: summary[k] for k in ("files_read", "files_skipped", "files_failed", "docs", "tokens")}}
    write_json(join(out_uri, SUMMARY), result)
    return result


def _project_roots(projects: list[dict], source: str, mode: str, tmp: Path) -> list[str]:
    """Roots for the chunker, which names docs ROOT_NAME/relative/path and takes ROOT's sub-directories as projects."""
    if not projects:
        return []
    if mode == "project":  # one root holding every project, so the chunker can order them by #include
        if not is_gcs(source):
            return [source]
        root = tmp / source.rstrip("/").rsplit("/", 1)[-1]
        for e in projects:
            fetch_dir(e["uri"], root / e["name"].rstrip("/"))
        return [str(root)]
    return [str(fetch_dir(e["uri"], tmp / str(i) / e["name"].rstrip("/"))) for i, e in enumerate(projects)]


def _fetch_file(uri: str, local_dir: Path) -> Path:
    """A local path of one input file (gs:// objects are downloaded into local_dir)."""
    if not is_gcs(uri):
        return Path(uri)
    parent, name = uri.rsplit("/", 1)
    local_dir.mkdir(parents=True, exist_ok=True)
    with open(local_dir / name, "wb") as f:
        storage.open_side(parent).read_into(name, f)
    return local_dir / name


def merge(dest: str, key: str) -> dict:
    """Concatenate the batches in order, dropping exact duplicate texts (the first copy is kept)."""
    out_uri = _staged(dest, key, "merged")
    done = read_json(join(out_uri, SUMMARY))
    if done is not None:
        return done
    n_batches = len(read_json(_staged(dest, key, INPUTS))["batches"])
    seen: set[bytes] = set()
    docs = tokens = duplicates = 0
    modes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="nanodata-merge-") as tmp:
        up = Path(tmp) / "up"
        up.mkdir()
        with open(up / DOCS, "w", encoding="utf-8") as out:
            for batch in range(n_batches):
                batch_uri = _staged(dest, key, "chunks", f"{batch:05d}")
                if read_json(join(batch_uri, SUMMARY)) is None:
                    raise RuntimeError(f"batch {batch} of build {key} is not chunked ({batch_uri}/{SUMMARY} missing)")
                batch_dir = fetch_dir(batch_uri, Path(tmp) / f"{batch:05d}")
                with open(batch_dir / DOCS, encoding="utf-8") as lines:
                    for line in lines:
                        doc = json.loads(line)
                        digest = hashlib.sha256(doc["text"].encode()).digest()
                        if digest in seen:
                            duplicates += 1
                            continue
                        seen.add(digest)
                        out.write(line if line.endswith("\n") else line + "\n")
                        docs += 1
                        tokens += doc.get("n_tokens") or 0
                        modes[doc.get("mode", "")] = modes.get(doc.get("mode", ""), 0) + 1
                if is_gcs(batch_uri):
                    shutil.rmtree(batch_dir)  # keep local disk at one batch, not the whole corpus twice
        put_dir(up, out_uri)
    result = {"key": key, "docs": docs, "tokens": tokens, "duplicates_dropped": duplicates, "modes": modes}
    write_json(join(out_uri, SUMMARY), result)
    return result


def to_parquet(dest: str, key: str, *, rows_per_file: int, val_fraction: float) -> dict:
    """Shuffled parquet shards + manifest + _COMPLETE into .staging/<key>/parquet/."""
    from nanodata.parquet import jsonl_to_parquet

    parquet_uri = _staged(dest, key, "parquet")
    if storage.exists(join(parquet_uri, COMPLETE)):
        manifest = read_json(join(parquet_uri, MANIFEST))
    else:
        with tempfile.TemporaryDirectory(prefix="nanodata-parquet-") as tmp:
            merged = fetch_dir(_staged(dest, key, "merged"), Path(tmp) / "merged") / DOCS
            manifest = jsonl_to_parquet([str(merged)], Path(tmp) / "parquet", rows_per_file=rows_per_file,
                                        val_fraction=val_fraction, seed=SEED)
            put_dir(Path(tmp) / "parquet", parquet_uri)
    return {"key": key, "rows": manifest["total_rows"], "shards": len(manifest["shards"]) + bool(manifest.get("val"))}


def upload(dest: str, key: str) -> dict:
    """Copy the staged shards to builds/<key>/: shards, then manifest.json, then _COMPLETE."""
    target = build_uri(dest, key)
    if storage.exists(join(target, COMPLETE)):
        return {"key": key, "uri": target, "uploaded": 0}
    with tempfile.TemporaryDirectory(prefix="nanodata-upload-") as tmp:
        local = fetch_dir(_staged(dest, key, "parquet"), Path(tmp))
        result = put_dir(local, target)
    return {"key": key, "uri": target, "uploaded": result["uploaded"]}


def publish(dest: str, key: str) -> dict:
    """Point latest.json at the finished build; returns the counts for the Asset event."""
    target = build_uri(dest, key)
    if not storage.exists(join(target, COMPLETE)):
        raise RuntimeError(f"{target}: no {COMPLETE}; the upload did not finish")
    manifest = read_json(join(target, MANIFEST))
    merged = read_json(_staged(dest, key, "merged", SUMMARY)) or {}
    shards = manifest["shards"] + ([manifest["val"]] if manifest.get("val") else [])
    info = {"key": key, "uri": target, "docs": manifest["total_rows"], "tokens": merged.get("tokens"),
            "shards": len(shards), "bytes": sum(s["bytes"] for s in shards),
            "duplicates_dropped": merged.get("duplicates_dropped")}
    latest_uri = join(dest, LATEST)
    if (read_json(latest_uri) or {}).get("key") != key:
        write_json(latest_uri, {**info, "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return info


def report(dest: str, key: str, tokenizer: str = "cl100k_base") -> str:
    """Write the build report next to the shards (builds/<key>/report/); returns its index.html URI."""
    from nanodata.report import INDEX_HTML, PLOTS, REPORT_DIR, REPORT_JSON, write_report

    target = build_uri(dest, key)
    report_uri = join(target, REPORT_DIR)
    if all(storage.exists(join(report_uri, name)) for name in (REPORT_JSON, INDEX_HTML, *PLOTS)):
        return join(report_uri, INDEX_HTML)
    if not is_gcs(target):
        return str(write_report(target, tokenizer=tokenizer))
    with tempfile.TemporaryDirectory(prefix="nanodata-report-") as tmp:
        local = fetch_dir(target, Path(tmp) / "build")
        index = write_report(local, Path(tmp) / REPORT_DIR, tokenizer=tokenizer)
        put_dir(index.parent, report_uri)
    return join(report_uri, INDEX_HTML)
