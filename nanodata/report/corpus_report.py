"""`nanodata report`: a corpus directory's build report, written beside its shards as BUILD/report/ (report.json,
the SVG plots and an index.html that shows them).

The figures are computed by nanodata.report.figures and drawn by nanodata.report.page; this module writes them
(every file to a temp name, then renamed, index.html last) locally or to a gs:// build, and is the command line.
nanodata.report.index finds builds (local or gs://) and keeps their reports up to date for the Airflow reports
plugin.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from nanodata.corpus import fetch_dir, put_dir
from nanodata.errors import NanodataError
from nanodata.ranges import REPORT_MAX_TOKENS, flag, local_path
from nanodata.report.figures import REPORT_JSON, build_report, check_build_dir, check_max_tokens, chunk_extras
from nanodata.report.page import INDEX_HTML, PLOTS, ambiguity_text, near_text, render_html, render_plots
from nanodata.storage import exists, is_gcs, join_uri
from nanodata.storage.files import atomic_write, disk_errors

REPORT_DIR = "report"


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
                        help="a built corpus: parquet shards (+ manifest.json) as written by `nanodata to-parquet` "
                             "or `nanodata chunk --parquet-dir` (whose summary in it is read too, all but the "
                             "ambiguity table: for that give it as --chunk-summary)")
    parser.add_argument("--out", metavar="DIR", type=local_path(), default=None,
                        help=f"where to write the report (default: BUILD_DIR/{REPORT_DIR})")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tokenizer for counting tokens when the shards have no complete n_tokens column "
                             "(tiktoken name or a `nanodata tokenizer train` directory; default: cl100k_base)")
    parser.add_argument("--max-tokens", type=flag(REPORT_MAX_TOKENS), default=None, metavar="N",
                        help="the --max-tokens the corpus was chunked with: the length histogram ends at N and "
                             "the crop table adds T=N (default: the histogram ends at the longest doc)")
    parser.add_argument("--chunk-summary", metavar="OUTPUT.done", default=None,
                        help="the summary `nanodata chunk` wrote next to its output: the report adds its table "
                             "of names ambiguous per project (global modes), its near-duplicate files (--dedup "
                             "near), what cleaning dropped and redacted and the clang resolver's figures; one with "
                             "neither ambiguity counts nor near-duplicates is refused")


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
