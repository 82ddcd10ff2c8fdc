"""A report shown: the SVG plots (`render_plots`, drawn by svgplot) and index.html (`render_html`) of the figures
that nanodata.report.figures computed, plus the plain-text tables the CLI prints. Pure functions of report.json's
data: nothing here reads a build.
"""

from __future__ import annotations

from html import escape

from nanodata.report.figures import REPORT_JSON, TOP_PROJECTS
from nanodata.report.svgplot import bar_chart, grouped_bar_chart

INDEX_HTML = "index.html"
PLOTS = {  # file -> what it shows
    "doc_tokens.svg": "document length distribution (tokens)",
    "docs_by_kind.svg": "share of documents and tokens by kind",
    "docs_by_project.svg": "share of documents and tokens by source project",
    "shard_sizes.svg": "shard sizes",
    "crop_fraction.svg": "fraction of tokens cropped by the best-fit loader",
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
{clang_html(report.get("clang"))}
{tasks}
{ambiguity_html(report.get("ambiguity"))}
{fidelity_section(report.get("fidelity"))}
{too_big_html(report.get("too_big"))}
<p><a href="{REPORT_JSON}">report.json</a></p>
</body></html>
"""


AMBIGUITY_TITLE = "Ambiguous names by project"
AMBIGUITY_NOTE = ("names defined more than once with one qualification within a project: no lookup by name resolves "
                  "them, so the names resolver pulls none of them in as a dependency (cross-file, project and "
                  "compilable modes; the clang resolver binds each use by its USR)")


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


CLANG_TITLE = "Clang resolver"
CLANG_COLUMNS = ("project", "files_clang", "files_names", "fallback reasons", "headers missing", "references_bound",
                 "references_bound_in_tree", "pulls_clang", "pulls_names", "pulls_gained", "pulls_lost", "pulls_changed")


def clang_html(clang: dict | None) -> str:
    """--resolver clang, per project (most files first): the files clang resolved and those that fell back to names
    (with why), the references clang bound, and the definitions pulled directly by clang against those names would
    pull, with examples of each difference (HTML; empty without the clang resolver)."""
    if not clang:
        return ""
    ordered = sorted(clang.items(), key=lambda item: (-item[1].get("files_clang", 0) - item[1].get("files_names", 0),
                                                      item[0]))
    rows = [{"project": name, **{c: figures.get(c, 0) for c in CLANG_COLUMNS[1:]},
             "fallback reasons": ", ".join(f"{k[7:]} {n:,}" for k, n in sorted(figures.items())
                                           if k.startswith("names: ")) or "none",
             "headers missing": ", ".join(f"{k[9:]} {n:,}" for k, n in sorted(
                 ((k, n) for k, n in figures.items() if k.startswith("missing: ")), key=lambda m: (-m[1], m[0]))[:3])}
            for name, figures in ordered[:NEAR_PROJECTS_SHOWN]]
    more = max(len(ordered) - NEAR_PROJECTS_SHOWN, 0)
    examples = "".join(
        f"<h3>pulls {what}</h3><ul>" + "".join(f"<li><code>{escape(x)}</code></li>" for x in listed) + "</ul>"
        for what in ("gained", "lost", "changed")
        if (listed := [x for _, figures in ordered for x in figures.get(f"{what}_examples", [])][:NEAR_EXAMPLES_SHOWN]))
    return (f"<h2>{CLANG_TITLE}</h2><p>Per project, most files first{f'; {more:,} more projects not listed' if more else ''}: "
            "files whose references libclang bound (files_clang) and files resolved by their names instead "
            "(files_names, with the reasons, and the headers missing most often: a library the corpus lacks), "
            "references bound and bound to a definition in the input tree, and the "
            "definitions pulled directly by clang (pulls_clang) against those the names rule pulls (pulls_names): "
            "gained, lost, and changed (the same name bound to another definition).</p>"
            + _columns_table(CLANG_COLUMNS, rows) + examples)


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
