"""A built corpus's figures: what report.json holds (`build_report`), read from manifest.json and the shards'
statistics.

Token counts come from the chunker's `n_tokens` column when every shard carries it whole, else every text is
tokenized with the report's tokenizer (to-parquet over plain {"text"} JSONL writes an all-null n_tokens column), so
one tokenizer counts all. Docs and tokens are also counted by the chunker's `kind` and by source project (from
`source`). The crop figures answer the question a trainer asks before choosing a sequence length: which fraction of
tokens would the best-fit loader discard at T? They replay the loader's packing (nanodata.loader.packing) on the
train docs. What the build's steps counted (near-dedup, cleaning, reuse, fidelity, ambiguity) is passed in, or read
from the chunk summary a `nanodata chunk --parquet-dir` build leaves.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import numpy as np

from nanodata.corpus.layout import MANIFEST, Manifest, is_complete, read_chunk_summary
from nanodata.dataset import read_manifest, split_files
from nanodata.errors import NanodataError
from nanodata.pipeline.shard_stats import lengths_of, shard_stats
from nanodata.ranges import REPORT_MAX_TOKENS
from nanodata.storage import is_gcs, join_uri, read_bytes

REPORT_JSON = "report.json"
REPORT_FORMAT = 3  # what report.json and the plots hold; a report of another format is rewritten (report.index)
CROP_T = (1024, 2048, 4096, 16384)  # plus the build's max_tokens when it is known
MAX_CROP_DOCS = 1_000_000  # replaying the packing takes ~1.5 s per million docs and T; a prefix is plenty
KINDS = {"file": "whole file", "chunk": "chunk", "split": "split"}  # the chunker's doc kinds, as shown here
TOP_PROJECTS = 20  # projects shown by name; the others are summed into one entry


def source_fingerprint(build_dir: Path | str) -> str:
    """Changes whenever the build changes: the manifest's bytes, else (a local dir) the shards' names, sizes and
    mtimes."""
    manifest = read_bytes(join_uri(str(build_dir), MANIFEST))
    if manifest is not None:
        return hashlib.sha256(manifest).hexdigest()
    listing = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(build_dir).glob("*.parquet"))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def _shares(docs: Counter, tokens: Counter, order: list[str]) -> dict[str, dict]:
    return {name: {"docs": int(docs[name]), "tokens": int(tokens[name])} for name in order}


def _kinds(docs: Counter, tokens: Counter) -> dict[str, dict]:
    """Docs and tokens per kind, in the chunker's order (whole file, chunk, split), named as the report shows them."""
    order = [k for k in KINDS if k in docs] + sorted(k for k in docs if k not in KINDS)
    return {KINDS.get(k, k): v for k, v in _shares(docs, tokens, order).items()}


def _projects(docs: Counter, tokens: Counter) -> dict[str, dict]:
    """The TOP_PROJECTS projects with the most tokens (name breaks ties), then the rest summed as one entry."""
    ranked = sorted(docs, key=lambda name: (-tokens[name], name))
    top, rest = ranked[:TOP_PROJECTS], ranked[TOP_PROJECTS:]
    out = _shares(docs, tokens, top)
    if rest:
        out[f"({len(rest)} other projects)"] = {"docs": sum(docs[n] for n in rest),
                                                "tokens": sum(tokens[n] for n in rest)}
    return out


def _length_histogram(lengths: np.ndarray, max_tokens: int | None) -> dict[str, int]:
    """Power-of-two bins (doc lengths are heavy-tailed) ending at max_tokens, else at the longest doc:
    0-15, 16-31, ..., 1024-2048 (the last bin includes its end); docs longer than max_tokens, if any,
    in a last bin '>max_tokens'."""
    end = max_tokens or max(int(lengths.max(initial=0)), 1)
    edges, edge = [0], 16
    while edge < end:
        edges.append(edge)
        edge *= 2
    edges.append(end)
    counts, _ = np.histogram(lengths, bins=edges)  # numpy's last bin is closed: [lo, end]
    labels = [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:-1], strict=False)] + [f"{edges[-2]}-{end}"]
    histogram = dict(zip(labels, counts.tolist(), strict=False))
    over = int((lengths > end).sum())
    if over:
        histogram[f">{end}"] = over
    return histogram


def _length_stats(lengths: np.ndarray) -> dict:
    if lengths.size == 0:
        return {"min": 0, "max": 0, "mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99]).tolist()
    return {"min": int(lengths.min()), "max": int(lengths.max()), "mean": round(float(lengths.mean()), 2),
            "median": p50, "p90": p90, "p99": p99}


def _crop_fractions(train_lengths: np.ndarray, max_tokens: int | None) -> dict[str, float]:
    from nanodata.loader.packing import simulate_crop_fraction  # the loader's own packing, imported lazily

    docs = train_lengths[:MAX_CROP_DOCS].tolist()
    return {str(T): round(float(simulate_crop_fraction(docs, T)), 6)
            for T in sorted({*CROP_T, *([max_tokens] if max_tokens else [])})}


def _manifest_summary(manifest: Manifest | None) -> dict | None:
    if manifest is None:
        return None
    val = manifest.val
    return {"version": manifest.version, "total_rows": manifest.total_rows, "train_shards": len(manifest.shards),
            "val_shard": val.name if val else None, "val_rows": val.rows if val else None,
            "bad_lines": manifest.bad_lines, "created_by": manifest.created_by}


def check_build_dir(build_dir: Path) -> None:
    if not build_dir.exists():
        raise NanodataError(f"build dir {build_dir} does not exist")
    if not build_dir.is_dir():
        raise NanodataError(f"build dir {build_dir}: is a file, not a directory")


def check_max_tokens(max_tokens) -> None:
    if max_tokens is not None and (not isinstance(max_tokens, int) or not REPORT_MAX_TOKENS.contains(max_tokens)):
        raise NanodataError(f"--max-tokens {max_tokens!r}: must be {REPORT_MAX_TOKENS.describe()}")


def read_shard_stats(build_dir: Path, tokenizer: str = "cl100k_base") -> list[dict]:
    """Every shard's statistics (nanodata.pipeline.shard_stats), train then val, each sorted by name. Tokens come
    from the n_tokens columns when every shard has a complete one, else every text is tokenized: one tokenizer
    counts all."""
    from nanodata.tokenizer import load  # tiktoken only when a report is built, not for the plugin's imports

    encoding = load(tokenizer).encoding  # a bad --tokenizer fails here, before any shard is read
    train, val = split_files(build_dir)
    if not train and not val:
        raise NanodataError(f"{build_dir}: no parquet shards")
    files = [("train", path) for path in train] + [("val", path) for path in val]
    stats = [shard_stats(path, split) for split, path in files]
    if any(s is None for s in stats):
        stats = [shard_stats(path, split, encoding) for split, path in files]
    return stats


def too_big_section(summary: dict | None) -> dict | None:
    """The files a chunk run skipped for the user's --max-file-bytes, from its summary (OUTPUT.done or a
    parquet dir's CHUNK_SUMMARY): {"max_file_bytes", "files", "listed": [{"file", "bytes"}, ...]}; None when
    no limit was set or the summary is not known."""
    if not summary or summary.get("max_file_bytes") is None:
        return None
    return {"max_file_bytes": summary["max_file_bytes"], "files": summary["files_too_big"],
            "listed": summary["too_big"]}


def build_report(build_dir: str | os.PathLike, tokenizer: str = "cl100k_base", partitions: list | None = None,
                 max_tokens: int | None = None, uri: str | None = None, tasks: list | None = None,
                 buckets: list | None = None, shards: list | None = None, ambiguity: dict | None = None,
                 fidelity: dict | None = None, too_big: dict | None = None,
                 near_duplicates: dict | None = None, cleaning: dict | None = None, reuse: dict | None = None,
                 clang: dict | None = None) -> dict:
    """The report's data (what report.json holds). `partitions`: the build's per-partition counts, if known;
    `max_tokens`: the chunker's limit, if known (the histogram ends there, the crop table adds T = max_tokens);
    `uri`: what the build is called (its gs:// URI when build_dir is a local copy); `tasks`: time per task kind
    (mapped or not), `buckets`: per dedupe bucket docs and bytes, `ambiguity`: names ambiguous per project (global
    modes), `fidelity`: the chunker's lines kept, balanced docs and cuts per project (fidelity.summarize), if known.
    `shards`: every shard's statistics when the build's tasks computed them (no shard is read then, and build_dir
    may be a gs:// URI), else read_shard_stats reads them. `too_big`: the files skipped for their size
    (too_big_section's form), if known, else what the chunk summary of a `nanodata chunk --parquet-dir` build
    holds (its fidelity too, when `fidelity` is not given). `near_duplicates`: the near-dedup summary
    (nanodata.pipeline.dedup.near, with docs_removed), if known, else the chunk summary's; None without near-dedup.
    `reuse`: files reused from the per-file cache or chunked, per project, and the cache's size (cpp_corpus.reuse_stats),
    else the chunk summary's (`nanodata chunk --cache`); None without a cache. `clang`: per project, the files
    resolved by clang or by names and the pulls against names (build_stats.clang_stats), else the chunk summary's;
    None without --resolver clang."""
    check_max_tokens(max_tokens)
    if shards is None:
        check_build_dir(Path(build_dir))
        shards = read_shard_stats(Path(build_dir), tokenizer)
    shards = sorted(shards, key=lambda s: (s["split"] == "val", s["name"]))
    per_shard = [lengths_of(s) for s in shards]
    groups: dict[str, Counter] = {}
    for s in shards:
        for name, counts in s["groups"].items():
            groups.setdefault(name, Counter()).update(counts)
    lengths = np.concatenate(per_shard)
    train_lengths = [x for s, x in zip(shards, per_shard, strict=True) if s["split"] == "train"]
    train_cat = np.concatenate(train_lengths) if train_lengths else lengths
    counted = any(s["counted"] for s in shards)
    build = str(build_dir) if is_gcs(str(build_dir)) else Path(build_dir)
    chunk_summary = (read_chunk_summary(build_dir) if fidelity is None or too_big is None or near_duplicates is None
                     or cleaning is None or reuse is None or clang is None
                     else None)
    return {
        "format": REPORT_FORMAT,
        "build": uri or (build if isinstance(build, str) else str(build.resolve())),
        "complete": is_complete(build),
        "source_fingerprint": source_fingerprint(build),
        "manifest": _manifest_summary(read_manifest(build)),
        "docs": int(lengths.size),
        "tokens": int(lengths.sum()),
        "token_counts_from": f"tokenized with {tokenizer}" if counted else "n_tokens column",
        "doc_tokens": _length_stats(lengths),
        "max_tokens": max_tokens,
        "doc_tokens_histogram": _length_histogram(lengths, max_tokens),
        "modes": dict(sorted(groups["mode"].items())),
        "kinds": _kinds(groups["kind"], groups["kind_tokens"]),
        "projects": _projects(groups["project"], groups["project_tokens"]),
        "project_count": len(groups["project"]),
        "shards": [{k: s[k] for k in ("name", "split", "rows", "bytes", "tokens")} for s in shards],
        "crop_fraction": _crop_fractions(train_cat, max_tokens),
        "crop_docs": int(min(train_cat.size, MAX_CROP_DOCS)),
        "partitions": partitions or [],
        "tasks": tasks or [],
        "buckets": buckets or [],
        "ambiguity": ambiguity,
        "fidelity": fidelity or (chunk_summary or {}).get("fidelity"),
        "too_big": too_big or too_big_section(chunk_summary),
        "near_duplicates": near_duplicates or (chunk_summary or {}).get("near_duplicates"),
        "cleaning": cleaning or (chunk_summary or {}).get("cleaning"),
        "reuse": reuse or (chunk_summary or {}).get("reuse"),
        "clang": clang or (chunk_summary or {}).get("clang"),
    }


def chunk_extras(done_path: str) -> dict:
    """What the report adds from `nanodata chunk`'s OUTPUT.done summary: the names ambiguous per project (global
    modes), the near-dedup summary (--dedup near) and what cleaning dropped and redacted; a summary that holds neither is an error (the user asked
    for something it cannot give)."""
    data = read_bytes(done_path)
    if data is None:
        raise NanodataError(f"--chunk-summary {done_path}: no such file")
    summary = json.loads(data)
    near = summary.get("near_duplicates")
    if "ambiguous_by_project" not in summary and near is None:
        raise NanodataError(f"--chunk-summary {done_path}: no ambiguity counts (chunked in mode "
                            f"{summary.get('mode')!r}: only cross-file, project and compilable count them) and no "
                            "near-duplicates (chunked with --dedup exact or before near-dedup)")
    ambiguity = ({k: summary[k] for k in ("ambiguous_names", "ambiguous_by_project")}
                 if "ambiguous_by_project" in summary else None)
    return {"ambiguity": ambiguity, "near_duplicates": near, "cleaning": summary.get("cleaning"),
            "clang": summary.get("clang")}
