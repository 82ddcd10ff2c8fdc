"""Where builds and their reports are: local dirs or gs:// prefixes (what the reports plugin serves).

A build is a directory holding a manifest.json. Its report lives in BUILD/report/ (written by the
corpus DAG's report task or `nanodata report`); `ensure_report` rewrites it when it is missing, was
made from another manifest or by another report format, without ever writing to a bucket.
`web_path` is where the plugin serves a build's report; `builds_index_html` is its list of builds.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from html import escape
from pathlib import Path

from nanodata import corpus, storage
from nanodata.corpus.layout import MANIFEST
from nanodata.errors import NanodataError
from nanodata.report.corpus_report import REPORT_DIR, write_report
from nanodata.report.figures import REPORT_FORMAT, REPORT_JSON, source_fingerprint
from nanodata.report.page import INDEX_HTML


def _join(base: str, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *parts])


def _is_current(report_json: bytes | None, fingerprint: str) -> bool:
    """report.json made from this build (its fingerprint) by this version of the report (its format)."""
    try:
        recorded = json.loads(report_json)
        return recorded["source_fingerprint"] == fingerprint and recorded.get("format") == REPORT_FORMAT
    except (TypeError, ValueError, KeyError):
        return False


def ensure_report(build: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """The report dir (local path or gs:// URI) of a build, up to date with the build's manifest.

    A local build's report is (re)written in place. A gs:// build's report is used where the DAG
    wrote it (BUILD/report/); when that is missing or stale, the build is fetched and the report
    written into a local cache dir, so serving a report never needs write access to the bucket.
    """
    build = str(build)
    if storage.parse_gs(build) is None:
        out = Path(build) / REPORT_DIR
        if not _is_current(storage.read_bytes(out / REPORT_JSON), source_fingerprint(Path(build))) \
                or not (out / INDEX_HTML).is_file():
            write_report(build, out)
        return str(out)
    manifest = storage.read_bytes(_join(build, MANIFEST))
    if manifest is None:
        raise NanodataError(f"{build}: no {MANIFEST}")
    want = hashlib.sha256(manifest).hexdigest()
    in_bucket = _join(build, REPORT_DIR)
    if _is_current(storage.read_bytes(_join(in_bucket, REPORT_JSON)), want):
        return in_bucket
    cache_root = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "nanodata" / "reports"
    cache = cache_root / hashlib.sha256(build.encode()).hexdigest()[:16]
    if not _is_current(storage.read_bytes(cache / REPORT_JSON), want):
        with tempfile.TemporaryDirectory(prefix="nanodata-report-") as tmp:
            if corpus.sync(build, tmp)["failed"]:
                raise NanodataError(f"{build}: could not download every file of the build")
            write_report(tmp, cache, uri=build)  # named by its URI, not the temp dir
    return str(cache)


def find_builds(root: str | os.PathLike, max_depth: int = 4) -> list[str]:
    """Builds under a local dir or gs:// prefix: dirs holding a manifest.json, as sorted relative paths.

    Hidden dirs (the DAG's .staging/) and report dirs are skipped, as are builds nested deeper than max_depth.
    """
    builds = set()
    for name in storage.list_names(root):
        *dirs, base = name.split("/")
        if base == MANIFEST and dirs and len(dirs) <= max_depth and REPORT_DIR not in dirs \
                and not any(d.startswith(".") for d in dirs):
            builds.add("/".join(dirs))
    return sorted(builds)


def uri_path(build_uri: str) -> str:
    """A build URI as a URL path: gs://bucket/prefix -> gs/bucket/prefix, /abs/path -> local/abs/path."""
    uri = build_uri.rstrip("/")
    return "gs/" + uri[len("gs://"):] if uri.startswith("gs://") else "local/" + uri.lstrip("/")


def web_path(build_uri: str, root: str | os.PathLike | None) -> str:
    """Where the reports plugin serves a build's report, relative to its mount point: builds/<path under the
    reports root>/ for a build under NANODATA_REPORTS_DIR, else uri/<uri_path>/ (any build of the corpus
    Asset's events)."""
    uri = build_uri.rstrip("/")
    if root:
        root = str(root).rstrip("/")
        if uri.startswith(root + "/"):
            return f"builds/{uri[len(root) + 1:]}/"
    return f"uri/{uri_path(uri)}/"


def build_rows(events: list[tuple], root: str | os.PathLike, root_builds: list[str]) -> list[dict]:
    """The list of builds, one row each: every build the corpus Asset's events name ((timestamp, extra) pairs,
    newest first; a build published twice is shown once, at its newest event), then the builds under root that
    no event names (made outside this deployment: no date, no counts)."""
    rows, seen = [], set()
    for timestamp, extra in events:
        uri = str((extra or {}).get("uri") or "").rstrip("/")
        if not uri or uri in seen:
            continue
        seen.add(uri)
        params = extra.get("params") or {}
        rows.append({"date": timestamp.strftime("%Y-%m-%d %H:%M UTC"), "mode": params.get("mode"),
                     "max_tokens": params.get("max_tokens"), "docs": extra.get("docs"),
                     "tokens": extra.get("tokens"), "uri": uri, "link": web_path(uri, root)})
    for build in root_builds:
        uri = f"{str(root).rstrip('/')}/{build}"
        if uri not in seen:
            rows.append({"date": None, "mode": None, "max_tokens": None, "docs": None, "tokens": None, "uri": uri,
                         "link": f"builds/{build}/"})
    return rows


def _cell(value) -> str:
    if value is None:
        return "<td>–</td>"
    return f"<td>{value:,}</td>" if isinstance(value, int) else f"<td>{escape(str(value))}</td>"


def builds_index_html(root: str | os.PathLike, rows: list[dict]) -> str:
    columns = ("date", "mode", "max_tokens", "docs", "tokens")
    head = "".join(f"<th>{c}</th>" for c in (*columns, "build"))
    body = "".join("<tr>" + "".join(_cell(r[c]) for c in columns)
                   + f'<td><a href="{escape(r["link"])}">{escape(r["uri"])}</a></td></tr>' for r in rows)
    return ('<!doctype html><html><head><meta charset="utf-8"><title>nanodata builds</title>'
            "<style>body{font-family:sans-serif;margin:1.5em} table{border-collapse:collapse}"
            "th,td{border:1px solid #ccc;padding:2px 8px;text-align:left}</style></head><body>"
            "<h1>nanodata builds</h1><p>Every corpus build of this deployment (the nanodata_cpp_corpus Asset's "
            f"events), newest first, and the builds under {escape(str(root))}. Each links to its report.</p>"
            f"<table><tr>{head}</tr>{body or '<tr><td colspan=6>no builds yet</td></tr>'}</table></body></html>\n")
