"""Build report of a corpus directory: report.json, SVG plots and an index.html that shows them.

Reads manifest.json and the parquet shards. Token counts come from the chunker's `n_tokens`
column when every shard carries it whole, else every text is tokenized with the report's tokenizer
(to-parquet over plain {"text"} JSONL writes an all-null n_tokens column), so one tokenizer counts all. The crop plot answers the question
a trainer asks before choosing a sequence length: which fraction of tokens would the best-fit
loader discard at T? It replays the loader's packing (nanodata.loader.packing) on the train docs.

nanodata.report_store finds builds (local or gs://) and keeps their reports up to date for the
Airflow reports plugin.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from html import escape
from pathlib import Path

import numpy as np
import pyarrow as pa

from nanodata.dataset import COMPLETE, MANIFEST, open_parquet, read_manifest, read_texts, split_files
from nanodata.errors import NanodataError
from nanodata.files import atomic_write, disk_errors, file_digest
from nanodata.svgplot import bar_chart

REPORT_DIR = "report"
REPORT_JSON = "report.json"
INDEX_HTML = "index.html"
CROP_T = (1024, 2048, 4096, 16384)
MAX_CROP_DOCS = 1_000_000  # replaying the packing takes ~1.5 s per million docs and T; a prefix is plenty
PLOTS = {  # file -> what it shows
    "doc_tokens.svg": "document length distribution (tokens)",
    "docs_per_mode.svg": "documents per chunking mode",
    "shard_sizes.svg": "shard sizes",
    "crop_fraction.svg": "fraction of tokens cropped by the best-fit loader",
}


def source_fingerprint(build_dir: Path) -> str:
    """Changes whenever the build changes: the manifest's bytes, else the shards' names, sizes and mtimes."""
    manifest = build_dir / MANIFEST
    if manifest.is_file():
        return file_digest(manifest, "sha256")
    listing = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in build_dir.glob("*.parquet"))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def _stored_lengths(path: Path) -> np.ndarray | None:
    """The shard's n_tokens column; None without one, or when it has nulls (docs the chunker did not count)."""
    pf = open_parquet(path)
    if "n_tokens" not in pf.schema_arrow.names:
        return None
    col = pf.read(columns=["n_tokens"]).column("n_tokens")
    if not pa.types.is_integer(col.type):
        raise NanodataError(f"{path}: column n_tokens must be integers (is {col.type})")
    return None if col.null_count else col.to_numpy().astype(np.int64)


def _counted_lengths(path: Path, encoding) -> np.ndarray:
    pf = open_parquet(path)
    return np.array([len(ids) for rg in range(pf.num_row_groups)
                     for ids in encoding.encode_ordinary_batch(read_texts(pf, path, rg))], dtype=np.int64)


def _modes(path: Path, rows: int) -> list[str]:
    pf = open_parquet(path)
    if "mode" not in pf.schema_arrow.names:
        return ["(no mode column)"] * rows
    return [str(m) for m in pf.read(columns=["mode"]).column("mode").to_pylist()]


def _length_histogram(lengths: np.ndarray) -> tuple[list[str], list[int]]:
    """Power-of-two bins (doc lengths are heavy-tailed): 0-15, 16-31, 32-63, ..."""
    top = int(lengths.max(initial=0))
    edges = [0, 16]
    while edges[-1] <= top:
        edges.append(edges[-1] * 2)
    counts, _ = np.histogram(lengths, bins=edges)
    return [f"{lo}-{hi - 1}" for lo, hi in zip(edges, edges[1:])], counts.tolist()


def _length_stats(lengths: np.ndarray) -> dict:
    if lengths.size == 0:
        return {"min": 0, "max": 0, "mean": 0.0, "median": 0.0, "p90": 0.0, "p99": 0.0}
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99]).tolist()
    return {"min": int(lengths.min()), "max": int(lengths.max()), "mean": round(float(lengths.mean()), 2),
            "median": p50, "p90": p90, "p99": p99}


def _crop_fractions(train_lengths: np.ndarray) -> dict[str, float]:
    from nanodata.loader.packing import simulate_crop_fraction  # the loader's own packing, imported lazily

    docs = train_lengths[:MAX_CROP_DOCS].tolist()
    return {str(T): round(float(simulate_crop_fraction(docs, T)), 6) for T in CROP_T}


def _manifest_summary(manifest: dict | None) -> dict | None:
    if manifest is None:
        return None
    val = manifest.get("val") or {}
    return {"version": manifest.get("version"), "total_rows": manifest.get("total_rows"),
            "shards": len(manifest.get("shards", [])), "val_rows": val.get("rows"),
            "bad_lines": manifest.get("bad_lines"), "created_by": manifest.get("created_by")}


def check_build_dir(build_dir: Path) -> None:
    if not build_dir.exists():
        raise NanodataError(f"build dir {build_dir} does not exist")
    if not build_dir.is_dir():
        raise NanodataError(f"build dir {build_dir}: is a file, not a directory")


def build_report(build_dir: str | os.PathLike, tokenizer: str = "cl100k_base", partitions: list | None = None) -> dict:
    """The report's data (what report.json holds); `partitions`: the build's per-partition counts, if known."""
    build_dir = Path(build_dir)
    check_build_dir(build_dir)
    from nanodata.tokenizer import load  # tiktoken only when a report is built, not for the plugin's imports

    encoding = load(tokenizer).encoding  # a bad --tokenizer fails here, before any shard is read
    train, val = split_files(build_dir)
    if not train and not val:
        raise NanodataError(f"{build_dir}: no parquet shards")
    files = [("train", path) for path in train] + [("val", path) for path in val]
    per_shard = [_stored_lengths(path) for _, path in files]
    has_n_tokens = all(lengths is not None for lengths in per_shard)
    if not has_n_tokens:
        per_shard = [_counted_lengths(path, encoding) for _, path in files]
    shards, train_lengths, modes = [], [], Counter()
    for (split, path), lengths in zip(files, per_shard):
        shards.append({"name": path.name, "split": split, "rows": int(lengths.size),
                       "bytes": path.stat().st_size, "tokens": int(lengths.sum())})
        if split == "train":
            train_lengths.append(lengths)
        modes.update(_modes(path, lengths.size))
    lengths = np.concatenate(per_shard)
    train_cat = np.concatenate(train_lengths) if train_lengths else lengths
    labels, counts = _length_histogram(lengths)
    return {
        "build_dir": str(build_dir.resolve()),
        "complete": (build_dir / COMPLETE).exists(),
        "source_fingerprint": source_fingerprint(build_dir),
        "manifest": _manifest_summary(read_manifest(build_dir)),
        "docs": int(lengths.size),
        "tokens": int(lengths.sum()),
        "token_counts_from": "n_tokens column" if has_n_tokens else f"tokenized with {tokenizer}",
        "doc_tokens": _length_stats(lengths),
        "doc_tokens_histogram": dict(zip(labels, counts)),
        "modes": dict(sorted(modes.items())),
        "shards": shards,
        "crop_fraction": _crop_fractions(train_cat),
        "crop_docs": int(min(train_cat.size, MAX_CROP_DOCS)),
        "partitions": partitions or [],
    }


def render_plots(report: dict) -> dict[str, str]:
    """file name -> SVG text, one per entry of PLOTS."""
    shards = report["shards"]
    return {
        "doc_tokens.svg": bar_chart(PLOTS["doc_tokens.svg"], list(report["doc_tokens_histogram"]),
                                    list(report["doc_tokens_histogram"].values()),
                                    xlabel="tokens per document", ylabel="documents"),
        "docs_per_mode.svg": bar_chart(PLOTS["docs_per_mode.svg"], list(report["modes"]),
                                       list(report["modes"].values()), xlabel="mode", ylabel="documents"),
        "shard_sizes.svg": bar_chart(PLOTS["shard_sizes.svg"], [s["name"] for s in shards],
                                     [s["bytes"] / 1024 for s in shards], xlabel="shard", ylabel="KiB",
                                     value_fmt=lambda v: f"{v:.1f}"),
        "crop_fraction.svg": bar_chart(PLOTS["crop_fraction.svg"], [f"T={t}" for t in report["crop_fraction"]],
                                       [100 * v for v in report["crop_fraction"].values()],
                                       xlabel="sequence length", ylabel="% of tokens cropped",
                                       value_fmt=lambda v: f"{v:.1f}%"),
    }


def _table(rows: list[tuple[str, object]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows) + "</table>"


def render_html(report: dict) -> str:
    stats, manifest = report["doc_tokens"], report["manifest"] or {}
    summary = [("build", report["build_dir"]), ("complete (_COMPLETE present)", report["complete"]),
               ("documents", report["docs"]), ("tokens", report["tokens"]),
               ("token counts", report["token_counts_from"]),
               *((f"doc tokens {k}", v) for k, v in stats.items()),
               *((f"cropped at T={t}", f"{100 * v:.2f}%") for t, v in report["crop_fraction"].items()),
               ("crop simulated on", f"{report['crop_docs']} train docs")]
    shards = "".join(f"<tr><td>{escape(s['name'])}</td><td>{s['split']}</td><td>{s['rows']}</td>"
                     f"<td>{s['tokens']}</td><td>{s['bytes']}</td></tr>" for s in report["shards"])
    plots = "".join(f'<figure><img src="{name}" alt="{escape(title)}"></figure>' for name, title in PLOTS.items())
    columns = ("partition", "files_read", "bytes_read", "files_skipped", "files_failed", "docs", "tokens", "seconds",
               "mb_per_s")
    partitions = ("<h2>Partitions</h2><p>Chunked per partition (docs and tokens before duplicates were dropped)</p>"
                  "<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"
                  + "".join("<tr>" + "".join(f"<td>{escape(str(p.get(c, '')))}</td>" for c in columns) + "</tr>"
                            for p in report.get("partitions", [])) + "</table>") if report.get("partitions") else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>nanodata build report</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;margin-bottom:1em}}
th,td{{border:1px solid #ccc;padding:2px 8px;text-align:left}} figure{{display:inline-block;margin:0.5em}}</style>
</head><body>
<h1>nanodata build report</h1>
{_table(summary)}
<h2>Manifest</h2>
{_table(list(manifest.items())) if manifest else "<p>no manifest.json</p>"}
<h2>Plots</h2>
{plots}
<h2>Shards</h2>
<table><tr><th>name</th><th>split</th><th>rows</th><th>tokens</th><th>bytes</th></tr>{shards}</table>
{partitions}
<p><a href="{REPORT_JSON}">report.json</a></p>
</body></html>
"""


def write_report(build_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 tokenizer: str = "cl100k_base", partitions: list | None = None) -> Path:
    """Write report.json, the SVG plots and index.html (last) into out_dir (default BUILD_DIR/report).

    Every file is written to a temp name and renamed. Returns the path of index.html.
    """
    out = Path(out_dir) if out_dir is not None else Path(build_dir) / REPORT_DIR
    check_build_dir(Path(build_dir))
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise NanodataError(f"--out {out}: {existing} is a file, not a directory")
    report = build_report(build_dir, tokenizer, partitions)
    with disk_errors(out):
        out.mkdir(parents=True, exist_ok=True)
    for name, svg in render_plots(report).items():
        atomic_write(out / name, svg)
    atomic_write(out / REPORT_JSON, json.dumps(report, indent=2) + "\n")
    atomic_write(out / INDEX_HTML, render_html(report))
    return out / INDEX_HTML


def configure_parser(parser) -> None:
    parser.add_argument("build_dir", metavar="BUILD_DIR",
                        help="a built corpus: parquet shards (+ manifest.json) as written by `nanodata to-parquet`")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help=f"where to write the report (default: BUILD_DIR/{REPORT_DIR})")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tokenizer for counting tokens when the shards have no complete n_tokens column "
                             "(tiktoken name or a dir from `nanodata tokenizer`; default: cl100k_base)")


def run(args) -> int:
    index = write_report(args.build_dir, args.out, tokenizer=args.tokenizer)
    report = json.loads((index.parent / REPORT_JSON).read_text())
    crop = ", ".join(f"T={t}: {100 * v:.1f}%" for t, v in report["crop_fraction"].items())
    print(f"{report['docs']} docs, {report['tokens']} tokens in {len(report['shards'])} shards; cropped {crop}")
    print(f"report: {index}")
    return 0
