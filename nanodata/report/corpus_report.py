"""Build report of a corpus directory: report.json, SVG plots and an index.html that shows them.

Reads manifest.json and the parquet shards. Token counts come from the chunker's `n_tokens`
column when every shard carries it whole, else every text is tokenized with the report's tokenizer
(to-parquet over plain {"text"} JSONL writes an all-null n_tokens column), so one tokenizer counts all.
Docs and tokens are also counted by the chunker's `kind` and by source project (from `source`).
The crop plot answers the question a trainer asks before choosing a sequence length: which fraction
of tokens would the best-fit loader discard at T? It replays the loader's packing
(nanodata.loader.packing) on the train docs, and the page says why docs chunked to max_tokens are
still cropped at T = max_tokens.

nanodata.report.index finds builds (local or gs://) and keeps their reports up to date for the
Airflow reports plugin.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import Counter
from html import escape
from pathlib import Path

import numpy as np

from nanodata.corpus import fetch_dir, put_dir
from nanodata.corpus.layout import MANIFEST, Manifest, is_complete, read_chunk_summary
from nanodata.dataset import read_manifest, split_files
from nanodata.errors import NanodataError
from nanodata.pipeline.shard_stats import lengths_of, shard_stats
from nanodata.ranges import REPORT_MAX_TOKENS, flag, local_path
from nanodata.report.svgplot import bar_chart, grouped_bar_chart
from nanodata.storage import exists, is_gcs, join_uri, read_bytes
from nanodata.storage.files import atomic_write, disk_errors

REPORT_DIR = "report"
REPORT_JSON = "report.json"
INDEX_HTML = "index.html"
REPORT_FORMAT = 2  # what report.json and the plots hold; a report of another format is rewritten (report.index)
CROP_T = (1024, 2048, 4096, 16384)  # plus the build's max_tokens when it is known
MAX_CROP_DOCS = 1_000_000  # replaying the packing takes ~1.5 s per million docs and T; a prefix is plenty
KINDS = {"file": "whole file", "chunk": "chunk", "split": "split"}  # the chunker's doc kinds, as shown here
TOP_PROJECTS = 20  # projects shown by name; the others are summed into one entry
PLOTS = {  # file -> what it shows
    "doc_tokens.svg": "document length distribution (tokens)",
    "docs_by_kind.svg": "share of documents and tokens by kind",
    "docs_by_project.svg": "share of documents and tokens by source project",
    "shard_sizes.svg": "shard sizes",
    "crop_fraction.svg": "fraction of tokens cropped by the best-fit loader",
}


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
                 near_duplicates: dict | None = None, cleaning: dict | None = None, reuse: dict | None = None) -> dict:
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
    else the chunk summary's (`nanodata chunk --cache`); None without a cache."""
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
                     or cleaning is None or reuse is None
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
    }


def _share_chart(name: str, shares: dict[str, dict], xlabel: str) -> str:
    """% of all docs and % of all tokens per entry, side by side: where the docs are vs where the tokens are."""
    totals = {what: sum(v[what] for v in shares.values()) or 1 for what in ("docs", "tokens")}
    series = {f"% of {what}": [100 * v[what] / totals[what] for v in shares.values()] for what in ("docs", "tokens")}
    return grouped_bar_chart(PLOTS[name], list(shares), series, xlabel=xlabel, ylabel="% of the corpus",
                             value_fmt=lambda v: f"{v:.0f}%")


def render_plots(report: dict) -> dict[str, str]:
    """file name -> SVG text, one per entry of PLOTS."""
    shards = report["shards"]
    return {
        "doc_tokens.svg": bar_chart(PLOTS["doc_tokens.svg"], list(report["doc_tokens_histogram"]),
                                    list(report["doc_tokens_histogram"].values()),
                                    xlabel="tokens per document", ylabel="documents"),
        "docs_by_kind.svg": _share_chart("docs_by_kind.svg", report["kinds"], "kind of doc"),
        "docs_by_project.svg": _share_chart("docs_by_project.svg", report["projects"], "source project"),
        "shard_sizes.svg": bar_chart(PLOTS["shard_sizes.svg"], [s["name"] for s in shards],
                                     [s["bytes"] / 1024 for s in shards], xlabel="shard", ylabel="KiB",
                                     value_fmt=lambda v: f"{v:.1f}"),
        "crop_fraction.svg": bar_chart(PLOTS["crop_fraction.svg"], [f"T={t}" for t in report["crop_fraction"]],
                                       [100 * v for v in report["crop_fraction"].values()],
                                       xlabel="sequence length", ylabel="% of tokens cropped",
                                       value_fmt=lambda v: f"{v:.1f}%"),
    }


def _cell(value) -> str:
    """A table cell: counts with thousands separators (1,234,567), anything else as it prints."""
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def _table(rows: list[tuple[str, object]]) -> str:
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{escape(_cell(v))}</td></tr>" for k, v in rows) + "</table>"


def _columns_table(columns: tuple[str, ...], rows: list[dict]) -> str:
    return ("<table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{escape(_cell(r.get(c, '')))}</td>" for c in columns) + "</tr>"
                      for r in rows) + "</table>")


def _shares_table(first: str, shares: dict[str, dict]) -> str:
    totals = {what: sum(v[what] for v in shares.values()) or 1 for what in ("docs", "tokens")}
    return _columns_table((first, "docs", "% of docs", "tokens", "% of tokens"), [
        {first: name, "docs": v["docs"], "% of docs": f"{100 * v['docs'] / totals['docs']:.1f}%",
         "tokens": v["tokens"], "% of tokens": f"{100 * v['tokens'] / totals['tokens']:.1f}%"}
        for name, v in shares.items()])


def crop_explanation(report: dict) -> str:
    """Why docs that fit in T are cropped anyway, and what crop="requeue" changes (HTML)."""
    max_tokens = report.get("max_tokens")
    at_max = report["crop_fraction"].get(str(max_tokens)) if max_tokens else None
    measured = (f" Here, at T = max_tokens = {max_tokens}, {100 * at_max:.2f}% of the tokens are cropped."
                if at_max is not None else "")
    return (
        "<p>Docs chunked to at most max_tokens still lose tokens at T = max_tokens. The best-fit loader fills "
        "every row of T+1 tokens with no padding: at each position it places the largest buffered doc (with its "
        "BOS) that fits the space left, and when none fits it crops the shortest doc to fill the row exactly and "
        "discards the rest of it. Every doc fits an empty row, but the space left at the end of a row is almost "
        f"always shorter than any doc, so most rows end with a cropped doc.{measured} A larger T crops fewer "
        "tokens (fewer row ends per token).</p>"
        "<p>With <code>crop=\"requeue\"</code> the loader puts the cropped tail back into the buffer as a new "
        "doc behind a BOS instead of discarding it: no token is lost (0% cropped at any T); the cost is one "
        "extra BOS per requeued tail, and a tail is trained on without the start of its doc in context.</p>")


FIDELITY_COLUMNS = ("project", "lines", "lines_kept_pct", "docs", "balanced_docs_pct", "oversized_statement_cuts",
                    "cut_docs", "parse_error_regions", "type_cycles")


def fidelity_section(fidelity: dict | None) -> str:
    """How faithful the chunks are to their source, per project: the share of source lines the docs keep as
    written (blank lines included; every line is expected), the share of docs whose braces and parens balance,
    the statements larger than max_tokens cut by lines (the docs they made are the only ones that may not
    balance), the files laid out by their braces because tree-sitter could not parse them, and (compilable) the
    types a cycle of bases or primary templates placed before one of them."""
    if not fidelity:
        return ""
    rows = [{"project": "(all)", **fidelity["total"]}]
    rows += [{"project": name, **stats} for name, stats in fidelity["by_project"].items()]
    return ("<h2>Fidelity to the source</h2><p>Per project, before duplicates were dropped: lines kept as written (of "
            "every source line, blank lines included), docs whose <code>{}</code> and <code>()</code> balance, statements "
            "larger than max_tokens cut by lines and the docs they made, files tree-sitter could not parse (laid out "
            "by their braces), types placed before a base or primary template by a cycle of them (compilable; "
            "examples in the chunk summary)</p>" + _columns_table(FIDELITY_COLUMNS, rows))


def render_html(report: dict) -> str:
    stats, manifest = report["doc_tokens"], report["manifest"] or {}
    summary = [("build", report["build"]), ("complete (_COMPLETE present)", report["complete"]),
               ("chunking mode", ", ".join(report["modes"])),
               ("max tokens per doc", report["max_tokens"] or "not given"),
               ("documents", report["docs"]), ("tokens", report["tokens"]),
               ("token counts", report["token_counts_from"]),
               *((f"doc tokens {k}", v) for k, v in stats.items()),
               *((f"cropped at T={t}", f"{100 * v:.2f}%") for t, v in report["crop_fraction"].items()),
               ("crop simulated on", f"{report['crop_docs']} train docs")]
    shards = _columns_table(("name", "split", "rows", "tokens", "bytes"), report["shards"])
    plots = "".join(f'<figure><img src="{name}" alt="{escape(title)}"></figure>' for name, title in PLOTS.items())
    projects = f"{report['project_count']} projects" + (f", the {TOP_PROJECTS} with the most tokens first"
                                                         if report["project_count"] > TOP_PROJECTS else "")
    partitions = ("<h2>Partitions</h2><p>Chunked per partition (docs and tokens before duplicates were dropped)</p>"
                  + _columns_table(("partition", "files_read", "bytes_read", "files_skipped", "files_failed", "docs",
                                    "tokens", "doc_bytes", "seconds", "mb_per_s"), report["partitions"])
                  if report["partitions"] else "")
    tasks = report.get("tasks") or []
    total = sum(t["seconds"] for t in tasks) or 1
    tasks = ("<h2>Tasks</h2><p>Time per task kind, summed over its instances; the unmapped share bounds the speedup "
             f"more workers can give (unmapped: {100 * sum(t['seconds'] for t in tasks if not t['mapped']) / total:.1f}% "
             "of task time)</p>" + _columns_table(("task", "mapped", "instances", "seconds"), tasks)
             if tasks else "")
    buckets = ("<h2>Buckets</h2><p>Exact dedupe per hash bucket: docs and bytes in, kept, duplicates dropped</p>"
               + _columns_table(("bucket", "docs_in", "docs", "duplicates", "bytes_in", "bytes", "seconds"),
                                report["buckets"]) if report.get("buckets") else "")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>nanodata build report</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1400px}} table{{border-collapse:collapse;margin-bottom:1em}}
th,td{{border:1px solid #ccc;padding:2px 8px;text-align:left}} figure{{display:inline-block;margin:0.5em}}</style>
</head><body>
<h1>nanodata build report</h1>
{_table(summary)}
<h2>Why docs that fit are still cropped</h2>
{crop_explanation(report)}
<h2>Plots</h2>
{plots}
<h2>By kind</h2>
<p>whole file: a source file that fits in max_tokens, kept whole; chunk: the file's preamble plus a run of whole
types and functions; split: one unit too long for max_tokens, cut at line boundaries.</p>
{_shares_table("kind", report["kinds"])}
<h2>By source project</h2>
<p>{projects} (a doc's project: its source up to the first '/' or ':')</p>
{_shares_table("project", report["projects"])}
<h2>Manifest</h2>
{_table(list(manifest.items())) if manifest else "<p>no manifest.json</p>"}
<h2>Shards</h2>
{shards}
{partitions}
{buckets}
{near_html(report.get("near_duplicates"))}
{cleaning_html(report.get("cleaning"))}
{reuse_html(report.get("reuse"))}
{tasks}
{ambiguity_html(report.get("ambiguity"))}
{fidelity_section(report.get("fidelity"))}
{too_big_html(report.get("too_big"))}
<p><a href="{REPORT_JSON}">report.json</a></p>
</body></html>
"""


AMBIGUITY_TITLE = "Ambiguous names by project"
AMBIGUITY_NOTE = ("names defined more than once with one qualification within a project: no lookup resolves them, "
                  "so no doc pulls them in as a dependency (cross-file, project and compilable modes)")


def _ambiguity_rows(ambiguity: dict) -> list[dict]:
    return [{"project": p, "ambiguous names": n} for p, n in ambiguity["ambiguous_by_project"].items()]


def _ambiguity_caption(ambiguity: dict) -> str:
    return (f"{ambiguity['ambiguous_names']} {AMBIGUITY_NOTE}; by project, most first "
            f"({len(ambiguity['ambiguous_by_project'])} projects listed)")


def too_big_html(section: dict | None) -> str:
    """Files over --max-file-bytes: never chunked, so the corpus lacks them (HTML; empty without a limit)."""
    if not section:
        return ""
    listed = section["listed"]
    more = f" (the first {len(listed)} listed)" if section["files"] > len(listed) else ""
    return (f"<h2>Files over --max-file-bytes</h2><p>{section['files']} file(s) larger than "
            f"{section['max_file_bytes']} bytes were skipped, not chunked{more}</p>"
            + _columns_table(("file", "bytes"), listed))


def ambiguity_html(ambiguity: dict | None) -> str:
    """The report page's table of names ambiguous per project; empty when not known (local modes)."""
    if ambiguity is None:
        return ""
    return (f"<h2>{AMBIGUITY_TITLE}</h2><p>{escape(_ambiguity_caption(ambiguity))}</p>"
            + _columns_table(("project", "ambiguous names"), _ambiguity_rows(ambiguity)))


def ambiguity_text(ambiguity: dict) -> str:
    """The same table as plain text, for `nanodata report`'s output."""
    rows = _ambiguity_rows(ambiguity)
    width = max([len("project"), *(len(r["project"]) for r in rows)])
    lines = [f"{AMBIGUITY_TITLE}: {_ambiguity_caption(ambiguity)}", f"  {'project':<{width}}  ambiguous names"]
    lines += [f"  {r['project']:<{width}}  {r['ambiguous names']:>15}" for r in rows]
    return "\n".join(lines)


NEAR_TITLE = "Near-duplicate files"
NEAR_PROJECTS_SHOWN = 100  # per-project rows on the page and in the output; a build has thousands of projects
NEAR_EXAMPLES_SHOWN = 20  # example pairs on the page (report.json keeps all the summary holds)
NEAR_PLOT_TITLE = "removed files by estimated Jaccard with the kept file"


def _near_caption(near: dict) -> str:
    """One line: threshold, files removed of files signed, bytes, docs and clusters (thousands separated)."""
    docs = f", {near['docs_removed']:,} docs" if near.get("docs_removed") is not None else ""
    return (f"Jaccard >= {near['threshold']:g}: {near['files_removed']:,} of {near['files_signed']:,} files "
            f"removed ({near['bytes_removed']:,} bytes{docs}) in {near['clusters']:,} clusters")


def _near_project_rows(near: dict) -> tuple[list[dict], int]:
    """The first NEAR_PROJECTS_SHOWN projects (the summary lists those with removals, most removed first), and
    how many more there are."""
    projects = list(near["by_project"].items())
    rows = [{"project": name, "files": f"{c['files']:,}", "removed": f"{c['removed']:,}", "kept": f"{c['kept']:,}",
             "bytes removed": f"{c['bytes_removed']:,}"} for name, c in projects[:NEAR_PROJECTS_SHOWN]]
    return rows, max(len(projects) - NEAR_PROJECTS_SHOWN, 0)


def _jaccard_label(bin_: dict) -> str:
    return f"{bin_['from']:.2f}-{bin_['to']:.2f}"


def _count_fmt(v: float) -> str:
    """Bar values are whole files; the y ticks of a short chart may be fractions (0.2, 0.4, ...)."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def near_plot(near: dict) -> str:
    """The Jaccard histogram as SVG text, inlined in the page: the reports plugin serves only the PLOTS files, and
    a plot that exists for some builds only does not belong there."""
    histogram = near["jaccard_histogram"]
    return bar_chart(NEAR_PLOT_TITLE, [_jaccard_label(b) for b in histogram], [b["files"] for b in histogram],
                     xlabel="estimated Jaccard", ylabel="files removed", value_fmt=_count_fmt)


CLEANING_TITLE = "Cleaning"
CLEANING_EXAMPLES_SHOWN = 20  # dropped files per reason on the page (the summary names every one, up to its limit)


def _cleaning_project_rows(cleaning: dict) -> tuple[list[dict], int]:
    """Per project, most dropped first: its license, files kept, files and bytes dropped per reason, redactions."""
    def dropped(entry):
        return sum(files for files, _ in entry["dropped"].values())

    ordered = sorted(cleaning["projects"].items(), key=lambda item: (-dropped(item[1]), item[0]))
    rows = [{"project": name, "license": entry["license"], "files kept": f"{entry['files_kept']:,}",
             "dropped": "; ".join(f"{reason} {files:,} ({size:,} bytes)"
                                  for reason, (files, size) in sorted(entry["dropped"].items())) or "-",
             "redacted": ", ".join(f"{kind} {n:,}" for kind, n in sorted(entry["redactions"].items())) or "-"}
            for name, entry in ordered[:NEAR_PROJECTS_SHOWN]]
    return rows, max(len(ordered) - NEAR_PROJECTS_SHOWN, 0)


REUSE_TITLE = "Reuse"


def reuse_html(reuse: dict | None) -> str:
    """Files whose results came from the per-file cache or were chunked again, per project (most chunked first), the
    corrupt entries rebuilt and the cache's size (HTML; empty for a build without a cache)."""
    if reuse is None:
        return ""
    ordered = sorted(reuse["by_project"].items(), key=lambda item: (-item[1]["bytes_chunked"], item[0]))
    columns = ("project", "files_reused", "files_chunked", "bytes_reused", "bytes_chunked", "entries_rebuilt",
               *(("files_parsed",) if any("files_parsed" in c for _, c in ordered) else ()))
    rows = [{"project": name, **counts} for name, counts in ordered[:NEAR_PROJECTS_SHOWN]]
    more = max(len(ordered) - NEAR_PROJECTS_SHOWN, 0)
    cache = reuse.get("cache")
    size = f" The cache ({escape(cache['uri'])}) holds {cache['entries']:,} entries, {cache['bytes']:,} bytes." if cache else ""
    read = reuse["bytes_reused"] + reuse["bytes_chunked"]
    return (f"<h2>{REUSE_TITLE}</h2><p>{reuse['files_reused']:,} files reused from the cache "
            f"({reuse['bytes_reused']:,} bytes), {reuse['files_chunked']:,} chunked "
            f"({reuse['bytes_chunked']:,} bytes, {100 * reuse['bytes_chunked'] / (read or 1):.1f}% of the input), "
            f"{reuse['entries_rebuilt']:,} corrupt or truncated entries rebuilt.{size} Per project, most chunked first"
            f"{f'; {more:,} more projects not listed' if more else ''} (global modes: files_parsed counts the files "
            "parsed again; files_chunked the files whose docs were made again, as a file they can see changed).</p>"
            + _columns_table(columns, rows))


def cleaning_html(cleaning: dict | None) -> str:
    """What cleaning dropped (per reason: files, bytes, examples with the figure that decided), redacted (by kind,
    never the text) and each project's license (HTML; empty when the build has no record of it)."""
    if cleaning is None:
        return ""
    reasons = [{"reason": reason, "files": f"{d['files']:,}", "bytes": f"{d['bytes']:,}"}
               for reason, d in cleaning["dropped"].items()]
    redacted = ", ".join(f"{kind} {n:,}" for kind, n in cleaning["redactions"].items()) or "nothing"
    rows, more = _cleaning_project_rows(cleaning)
    html = (f"<h2>{CLEANING_TITLE}</h2><p>{cleaning['files_dropped']:,} files dropped ({cleaning['bytes_dropped']:,} "
            f"bytes) before chunking; placeholders put in: {escape(redacted)}.</p>"
            + _columns_table(("reason", "files", "bytes"), reasons)
            + f"<h3>By project</h3><p>License (SPDX), files kept, dropped per reason and redactions, most dropped "
              f"first{f'; {more:,} more projects not listed' if more else ''}</p>"
            + _columns_table(("project", "license", "files kept", "dropped", "redacted"), rows))
    for reason, d in cleaning["dropped"].items():
        listed = d["listed"][:CLEANING_EXAMPLES_SHOWN]
        html += (f"<h3>Dropped: {escape(reason)}</h3><p>{len(listed)} of {d['files']:,} files, with what decided</p>"
                 + _columns_table(("file", "figure"), listed))
    if cleaning.get("items"):
        items = [{"benchmark item": item, "files": f"{n:,}"}
                 for item, n in sorted(cleaning["items"].items(), key=lambda kv: (-kv[1], kv[0]))[:100]]
        html += "<h3>Benchmark items found</h3>" + _columns_table(("benchmark item", "files"), items)
    return html


def near_html(near: dict | None) -> str:
    """The files removed as near-copies of others (MinHash LSH, verified): totals, per project, the largest
    clusters, the similarity histogram and example pairs (HTML; empty without near-dedup). Every name is the
    user's data: _columns_table escapes it."""
    if near is None:
        return ""
    rows, more = _near_project_rows(near)
    more_text = f"; {more:,} more projects not listed" if more else ""
    clusters = [{"kept file": c["kept"], "files": f"{c['files']:,}", "bytes": f"{c['bytes']:,}",
                 "projects of the removed copies": ", ".join(c["removed_projects"])}
                for c in near["largest_clusters"]]
    examples = [{"removed file": e["removed"], "kept file": e["kept"], "Jaccard": f"{e['jaccard']:.3f}"}
                for e in near["examples"][:NEAR_EXAMPLES_SHOWN]]
    return (f"<h2>{NEAR_TITLE}</h2><p>{escape(_near_caption(near))}. A cluster of near-copies keeps one file (not a "
            "vendored copy when it has another, else the first in input order); the others lose their docs.</p>"
            f"<h3>By project</h3><p>Files signed, removed and kept, projects with removals, most removed first"
            f"{more_text}</p>"
            + _columns_table(("project", "files", "removed", "kept", "bytes removed"), rows)
            + "<h3>Largest clusters</h3><p>The file kept, the cluster's files and bytes, the projects of the removed "
              "copies</p>"
            + _columns_table(("kept file", "files", "bytes", "projects of the removed copies"), clusters)
            + f"<h3>Similarity</h3><figure>{near_plot(near)}</figure>"
            + f"<h3>Examples</h3><p>{len(examples)} of {near['files_removed']:,} removed files with the file kept "
              "for them</p>"
            + _columns_table(("removed file", "kept file", "Jaccard"), examples))


def near_text(near: dict) -> str:
    """The summary line and the per-project table as plain text, for `nanodata report`'s output."""
    rows, more = _near_project_rows(near)
    columns = ("project", "files", "removed", "kept", "bytes removed")
    widths = {c: max([len(c), *(len(r[c]) for r in rows)]) for c in columns}
    lines = [f"{NEAR_TITLE}: {_near_caption(near)}",
             "  " + "  ".join(f"{c:<{widths[c]}}" if c == "project" else f"{c:>{widths[c]}}" for c in columns)]
    lines += ["  " + "  ".join(f"{r[c]:<{widths[c]}}" if c == "project" else f"{r[c]:>{widths[c]}}"
                               for c in columns) for r in rows]
    if more:
        lines.append(f"  ... and {more:,} more projects")
    return "\n".join(lines)


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
    return {"ambiguity": ambiguity, "near_duplicates": near, "cleaning": summary.get("cleaning")}


def write_report(build_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                 tokenizer: str = "cl100k_base", max_tokens: int | None = None, **extra) -> Path:
    """Write report.json, the SVG plots and index.html (last) into out_dir (default BUILD_DIR/report).
    `extra`: what the build's steps counted (see build_report).

    Every file is written to a temp name and renamed. Returns the path of index.html.
    """
    out = Path(out_dir) if out_dir is not None else Path(build_dir) / REPORT_DIR
    if not is_gcs(str(build_dir)):
        check_build_dir(Path(build_dir))
    check_max_tokens(max_tokens)
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise NanodataError(f"--out {out}: {existing} is a file, not a directory")
    report = build_report(build_dir, tokenizer, max_tokens=max_tokens, **extra)
    with disk_errors(out):
        out.mkdir(parents=True, exist_ok=True)
    for name, svg in render_plots(report).items():
        atomic_write(out / name, svg)
    atomic_write(out / REPORT_JSON, json.dumps(report, indent=2) + "\n")
    atomic_write(out / INDEX_HTML, render_html(report))
    return out / INDEX_HTML


def report_build(build: str, *, tokenizer: str = "cl100k_base", max_tokens: int | None = None, **extra) -> str:
    """The report of a build (a local dir or gs:// URI) written next to its shards (BUILD/report/), once: a
    complete report there is kept. `extra`: what the build's steps counted (see build_report). With the shards'
    statistics among them, no shard is read; else a gs:// build is fetched to a temp dir (the report names the
    build's URI, not that copy). A gs:// build's report is written in a temp dir and uploaded. Returns index.html's
    path or URI."""
    report_uri = join_uri(build, REPORT_DIR)
    if all(exists(join_uri(report_uri, name)) for name in (REPORT_JSON, INDEX_HTML, *PLOTS)):
        return join_uri(report_uri, INDEX_HTML)
    if not is_gcs(build):
        return str(write_report(build, tokenizer=tokenizer, max_tokens=max_tokens, **extra))
    with tempfile.TemporaryDirectory(prefix="nanodata-report-") as tmp:
        local = build if extra.get("shards") is not None else fetch_dir(build, Path(tmp) / "build")
        index = write_report(local, Path(tmp) / REPORT_DIR, tokenizer=tokenizer, max_tokens=max_tokens, uri=build,
                             **extra)
        put_dir(index.parent, report_uri)
    return join_uri(report_uri, INDEX_HTML)


def configure_parser(parser) -> None:
    parser.add_argument("build_dir", metavar="BUILD_DIR",
                        help="a built corpus: parquet shards (+ manifest.json) as written by `nanodata to-parquet`")
    parser.add_argument("--out", metavar="DIR", type=local_path(), default=None,
                        help=f"where to write the report (default: BUILD_DIR/{REPORT_DIR})")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tokenizer for counting tokens when the shards have no complete n_tokens column "
                             "(tiktoken name or a dir from `nanodata tokenizer`; default: cl100k_base)")
    parser.add_argument("--max-tokens", type=flag(REPORT_MAX_TOKENS), default=None, metavar="N",
                        help="the --max-tokens the corpus was chunked with: the length histogram ends at N and "
                             "the crop table adds T=N (default: the histogram ends at the longest doc)")
    parser.add_argument("--chunk-summary", metavar="OUTPUT.done", default=None,
                        help="the summary `nanodata chunk` wrote next to its output: the report adds its table "
                             "of names ambiguous per project (global modes) and its near-duplicate files "
                             "(--dedup near)")


def run(args) -> int:
    extras = chunk_extras(args.chunk_summary) if args.chunk_summary else {}
    index = write_report(args.build_dir, args.out, tokenizer=args.tokenizer, max_tokens=args.max_tokens, **extras)
    report = json.loads((index.parent / REPORT_JSON).read_text())
    crop = ", ".join(f"T={t}: {100 * v:.1f}%" for t, v in report["crop_fraction"].items())
    print(f"{report['docs']} docs, {report['tokens']} tokens in {len(report['shards'])} shards; cropped {crop}")
    if report["ambiguity"] is not None:
        print(ambiguity_text(report["ambiguity"]))
    if report["near_duplicates"] is not None:  # --chunk-summary's, else a --parquet-dir build's CHUNK_SUMMARY
        print(near_text(report["near_duplicates"]))
    print(f"report: {index}")
    return 0
