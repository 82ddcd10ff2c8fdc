"""Airflow UI plugin: the build report of every nanodata corpus, served by the api-server.

A FastAPI app mounted at /nanodata-reports lists the builds under NANODATA_REPORTS_DIR (a local
dir or a gs://bucket/prefix such as the corpus DAG's destination; a build is a dir holding a
manifest.json) and serves each build's report: index.html, report.json and the SVG plots, as
the DAG's report task wrote them, or written by `nanodata.report` when missing or stale
(nanodata.report_store). A nav
entry embeds the list in the Airflow UI. Requests need an Airflow login (the UI's session cookie
or a Bearer JWT from /auth/token), like the rest of the API.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from airflow.api_fastapi.core_api.security import get_user
from airflow.plugins_manager import AirflowPlugin
from nanodata import report, report_store, storage
from nanodata.errors import NanodataError

URL_PREFIX = "/nanodata-reports"
DEFAULT_ROOT = str(Path.home() / ".cache" / "nanodata" / "builds")
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".svg": "image/svg+xml"}
SERVED = {report.INDEX_HTML, report.REPORT_JSON, *report.PLOTS}  # nothing else of a build is exposed


def reports_root() -> str:
    return os.environ.get("NANODATA_REPORTS_DIR", DEFAULT_ROOT).rstrip("/")


app = FastAPI(title="nanodata build reports", dependencies=[Depends(get_user)])


@app.get("/", response_class=HTMLResponse)
def list_builds() -> str:
    root = reports_root()
    return report_store.builds_index_html(root, report_store.find_builds(root), link_prefix="builds/")


@app.get("/builds/{path:path}")
def build_file(path: str):
    root = reports_root()
    builds = report_store.find_builds(root)
    if path in builds:  # the report's relative links need the trailing slash
        return RedirectResponse(path.rsplit("/", 1)[-1] + "/")
    build, _, name = path.rpartition("/")
    name = name or report.INDEX_HTML
    if build not in builds or name not in SERVED:  # only listed builds and report files: no ../ escapes
        raise HTTPException(status_code=404, detail=f"no report file {path!r}")
    try:
        data = storage.read_bytes(f"{report_store.ensure_report(f'{root}/{build}')}/{name}")
    except NanodataError as exc:
        raise HTTPException(status_code=422, detail=f"build {build}: {exc}") from None
    if data is None:
        raise HTTPException(status_code=404, detail=f"no report file {path!r}")
    return Response(data, media_type=MEDIA_TYPES[Path(name).suffix])


class NanodataReportsPlugin(AirflowPlugin):
    name = "nanodata_reports"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "nanodata build reports"}]
    external_views = [{"name": "Corpus reports", "href": f"{URL_PREFIX}/", "url_route": "nanodata-reports",
                       "destination": "nav", "category": "browse"}]
