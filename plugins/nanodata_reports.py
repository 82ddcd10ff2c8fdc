"""Airflow UI plugin: the build report of every nanodata corpus, served by the api-server.

A FastAPI app mounted at /nanodata-reports lists every corpus build this deployment made, newest first
(the nanodata_cpp_corpus Asset's events: their `extra` holds each build's URI, Params and counts), plus
the builds found under NANODATA_REPORTS_DIR (a local dir or a gs://bucket/prefix; a build is a dir
holding a manifest.json), and serves each build's report: index.html, report.json and the SVG plots,
as the DAG's report task wrote them, or written by `nanodata.report.corpus_report` when missing or stale
(nanodata.report.index). A build under NANODATA_REPORTS_DIR is at builds/<its path there>/, any other
at uri/gs/<bucket>/<prefix>/ or uri/local/<path>/ (nanodata.report.index.web_path). A nav entry embeds
the list in the Airflow UI. Requests need an Airflow login (the UI's session cookie or a Bearer JWT
from /auth/token), like the rest of the API.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import get_user
from airflow.models.asset import AssetEvent, AssetModel
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import select

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.report import figures, index, page

URL_PREFIX = "/nanodata-reports"
CORPUS_ASSET = "nanodata_cpp_corpus"  # the corpus DAG's Asset (dags/_common.py CPP_CORPUS), emitted per build
DEFAULT_ROOT = str(Path.home() / ".cache" / "nanodata" / "builds")
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".json": "application/json", ".svg": "image/svg+xml"}
SERVED = {page.INDEX_HTML, figures.REPORT_JSON, *page.PLOTS}  # nothing else of a build is exposed


def reports_root() -> str:
    return os.environ.get("NANODATA_REPORTS_DIR", DEFAULT_ROOT).rstrip("/")


def corpus_events(session) -> list[tuple]:
    """(timestamp, extra) of every event of the corpus Asset, newest first."""
    query = (select(AssetEvent.timestamp, AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
             .where(AssetModel.name == CORPUS_ASSET).order_by(AssetEvent.timestamp.desc(), AssetEvent.id.desc()))
    return [tuple(row) for row in session.execute(query)]


def served_builds(root: str, events: list[tuple]) -> dict[str, str]:
    """{web path without its trailing slash: build URI} of every build with a report here."""
    builds = {f"builds/{b}": f"{root}/{b}" for b in index.find_builds(root)}
    for _, extra in events:
        uri = str((extra or {}).get("uri") or "").rstrip("/")
        if uri:
            builds.setdefault(index.web_path(uri, root).rstrip("/"), uri)
    return builds


app = FastAPI(title="nanodata build reports", dependencies=[Depends(get_user)])


@app.get("/", response_class=HTMLResponse)
def list_builds(session: SessionDep) -> str:
    root = reports_root()
    rows = index.build_rows(corpus_events(session), root, index.find_builds(root))
    return index.builds_index_html(root, rows)


@app.get("/{path:path}")
def build_file(path: str, session: SessionDep):
    builds = served_builds(reports_root(), corpus_events(session))
    if path in builds:  # the report's relative links need the trailing slash
        return RedirectResponse(path.rsplit("/", 1)[-1] + "/")
    build, _, name = path.rpartition("/")
    name = name or page.INDEX_HTML
    if build not in builds or name not in SERVED:  # only listed builds and report files: no ../ escapes
        raise HTTPException(status_code=404, detail=f"no report file {path!r}")
    try:
        data = storage.read_bytes(f"{index.ensure_report(builds[build])}/{name}")
    except NanodataError as exc:
        raise HTTPException(status_code=422, detail=f"build {builds[build]}: {exc}") from None
    if data is None:
        raise HTTPException(status_code=404, detail=f"no report file {path!r}")
    return Response(data, media_type=MEDIA_TYPES[Path(name).suffix])


class NanodataReportsPlugin(AirflowPlugin):
    name = "nanodata_reports"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "nanodata build reports"}]
    external_views = [{"name": "Corpus reports", "href": f"{URL_PREFIX}/", "url_route": "nanodata-reports",
                       "destination": "nav", "category": "browse"}]
