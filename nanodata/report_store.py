"""Where builds and their reports are: local dirs or gs:// prefixes (what the reports plugin serves).

A build is a directory holding a manifest.json. Its report lives in BUILD/report/ (written by the
corpus DAG's report task or `nanodata report`); `ensure_report` rewrites it when it is missing
or was made from another manifest, without ever writing to a bucket.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from html import escape
from pathlib import Path

from nanodata import storage
from nanodata.dataset import MANIFEST
from nanodata.errors import NanodataError
from nanodata.report import INDEX_HTML, REPORT_DIR, REPORT_JSON, source_fingerprint, write_report


def _join(base: str, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *parts])


def _recorded_fingerprint(report_json: bytes | None) -> str | None:
    try:
        return json.loads(report_json)["source_fingerprint"]
    except (TypeError, ValueError, KeyError):
        return None


def ensure_report(build: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """The report dir (local path or gs:// URI) of a build, up to date with the build's manifest.

    A local build's report is (re)written in place. A gs:// build's report is used where the DAG
    wrote it (BUILD/report/); when that is missing or stale, the build is fetched and the report
    written into a local cache dir, so serving a report never needs write access to the bucket.
    """
    build = str(build)
    if storage.parse_gs(build) is None:
        out = Path(build) / REPORT_DIR
        if (_recorded_fingerprint(storage.read_bytes(out / REPORT_JSON)) != source_fingerprint(Path(build))
                or not (out / INDEX_HTML).is_file()):
            write_report(build, out)
        return str(out)
    manifest = storage.read_bytes(_join(build, MANIFEST))
    if manifest is None:
        raise NanodataError(f"{build}: no {MANIFEST}")
    want = hashlib.sha256(manifest).hexdigest()
    in_bucket = _join(build, REPORT_DIR)
    if _recorded_fingerprint(storage.read_bytes(_join(in_bucket, REPORT_JSON))) == want:
        return in_bucket
    cache_root = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "nanodata" / "reports"
    cache = cache_root / hashlib.sha256(build.encode()).hexdigest()[:16]
    if _recorded_fingerprint(storage.read_bytes(cache / REPORT_JSON)) != want:
        with tempfile.TemporaryDirectory(prefix="nanodata-report-") as tmp:
            if storage.sync(build, tmp)["failed"]:
                raise NanodataError(f"{build}: could not download every file of the build")
            write_report(tmp, cache)
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


def builds_index_html(root: str | os.PathLike, builds: list[str], link_prefix: str = "") -> str:
    items = "".join(f'<li><a href="{link_prefix}{escape(b)}/">{escape(b)}</a></li>' for b in builds)
    return (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>nanodata builds</title></head>"
            f"<body style=\"font-family:sans-serif\"><h1>nanodata builds</h1><p>under {escape(str(root))}</p>"
            f"<ul>{items or '<li>no builds yet</li>'}</ul></body></html>\n")
