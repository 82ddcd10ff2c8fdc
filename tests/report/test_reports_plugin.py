"""plugins/nanodata_reports.py in-process: routes, auth, builds on local disk or in a GCS bucket, and the
list of every build from the corpus Asset's events in a real Airflow metadata DB (SQLite).

The deployment test fetches the same pages from a real api-server; here the app is driven with
FastAPI's TestClient and Airflow's own `get_user` dependency (a logged-in user is injected only
where a test says so). tests/dags/test_cpp_corpus_dag.py lists a build the DAG itself published.
"""

import importlib.util
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from built_corpus import write_built_corpus
from fastapi.testclient import TestClient

from nanodata import corpus, storage
from nanodata.report import corpus_report as report
from nanodata.report import figures

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "nanodata_reports.py"


@pytest.fixture(scope="module")
def plugin(airflow_db):
    spec = importlib.util.spec_from_file_location("nanodata_reports_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(plugin):
    from airflow.api_fastapi.core_api.security import get_user

    clear_events()
    plugin.app.dependency_overrides[get_user] = lambda: "test-user"
    yield TestClient(plugin.app, follow_redirects=False)
    plugin.app.dependency_overrides.clear()


def clear_events():
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(AssetEvent).delete()


def publish_event(extra: dict, when: datetime | None = None) -> None:
    """An event of the corpus Asset, recorded the way Airflow records one (its asset manager, the DB)."""
    from airflow.assets.manager import AssetManager
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.name == "nanodata_cpp_corpus").one_or_none()
        if asset is None:
            asset = AssetModel(name="nanodata_cpp_corpus", uri="nanodata://corpus/cpp")
            session.add(asset)
            session.flush()
        event = AssetManager.register_asset_change(asset=asset, extra=extra, session=session, source_is_api=True)
        if when is not None:
            session.query(AssetEvent).filter(AssetEvent.id == event.id).update({"timestamp": when})


def event_extra(uri: str, docs: int, mode: str = "basic", max_tokens: int = 2048) -> dict:
    """The `extra` of the corpus DAG's publish task (nanodata.jobs.cpp_corpus.publish)."""
    key = uri.rsplit("/", 1)[-1]
    return {"key": key, "uri": uri, "docs": docs, "tokens": docs * 100, "shards": 2, "bytes": 1000,
            "duplicates_dropped": 0, "params": {"mode": mode, "max_tokens": max_tokens, "tokenizer": "cl100k_base",
                                               "rows_per_file": 50000, "val_fraction": 0.01}}


def table_rows(html: str) -> list[list[str]]:
    """The cells of each row of the builds table (tags stripped), header excluded."""
    rows = re.findall(r"<tr>(.*?)</tr>", html)[1:]
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows]


def test_plugin_registers_app_and_nav_link(plugin):
    (app,) = plugin.NanodataReportsPlugin.fastapi_apps
    assert app["url_prefix"] == plugin.URL_PREFIX and app["app"] is plugin.app
    (view,) = plugin.NanodataReportsPlugin.external_views
    assert view["href"] == f"{plugin.URL_PREFIX}/" and view["destination"] == "nav"


def test_requires_login(plugin, tmp_path, monkeypatch):
    monkeypatch.setenv("NANODATA_REPORTS_DIR", str(tmp_path))
    r = TestClient(plugin.app).get("/")
    assert r.status_code == 401


def test_local_builds(client, tmp_path, monkeypatch):
    root = tmp_path / "dest"
    write_built_corpus(root / "builds" / "k1", [[3, 4, 5], [6]])
    monkeypatch.setenv("NANODATA_REPORTS_DIR", str(root))
    listing = client.get("/")
    assert listing.status_code == 200 and 'href="builds/builds/k1/"' in listing.text

    r = client.get("/builds/builds/k1")
    assert r.status_code == 307 and r.headers["location"] == "k1/"
    page = client.get("/builds/builds/k1/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "crop_fraction.svg" in page.text
    svg = client.get("/builds/builds/k1/doc_tokens.svg")
    assert svg.status_code == 200 and svg.headers["content-type"] == "image/svg+xml"
    assert svg.text.startswith("<svg")
    assert client.get("/builds/builds/k1/report.json").json()["docs"] == 4

    for bad in ("/builds/builds/k1/manifest.json", "/builds/builds/k1/..%2Fk1%2Findex.html",
                "/builds/builds/nope/index.html", "/builds/..%2F..%2Fetc/passwd"):
        assert client.get(bad).status_code == 404, bad


def test_builds_in_a_bucket(client, gcs_emulator, tmp_path, monkeypatch):
    """A gs:// root: the DAG's report in the bucket is served as is; a missing one is written to a local cache."""
    gcs_emulator.create_bucket("reports-plugin")
    for key in ("with-report", "without-report"):
        local = write_built_corpus(tmp_path / key, [[10, 20, 30], [40]])
        if key == "with-report":
            report.write_report(local)
        assert corpus.sync(str(local), f"gs://reports-plugin/cpp/builds/{key}")["failed"] == 0
    monkeypatch.setenv("NANODATA_REPORTS_DIR", "gs://reports-plugin/cpp")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the cache dir for generated reports

    assert 'href="builds/builds/with-report/"' in client.get("/").text
    served = client.get("/builds/builds/with-report/report.json")
    assert served.content == storage.read_bytes("gs://reports-plugin/cpp/builds/with-report/report/report.json")

    generated = client.get("/builds/builds/without-report/report.json")
    assert generated.status_code == 200 and generated.json()["docs"] == 4
    assert storage.read_bytes("gs://reports-plugin/cpp/builds/without-report/report/report.json") is None
    assert list((tmp_path / "home" / ".cache" / "nanodata" / "reports").glob("*/report.json"))
    assert json.loads(generated.content)["source_fingerprint"] == json.loads(served.content)["source_fingerprint"]


def test_lists_every_build_of_the_asset_events_newest_first(client, gcs_emulator, tmp_path, monkeypatch):
    """Builds written to any destination are listed (not only those under NANODATA_REPORTS_DIR), newest first,
    with date, mode, max_tokens, docs, tokens and a link to their report, which is served."""
    gcs_emulator.create_bucket("plugin-events")
    root = tmp_path / "reports-root"
    write_built_corpus(root / "builds" / "k-root", [[3, 4, 5], [6]])  # under the root, no event: listed last
    elsewhere = write_built_corpus(tmp_path / "elsewhere" / "builds" / "k-local", [[1, 2], [3]])
    in_bucket = write_built_corpus(tmp_path / "b", [[10, 20, 30], [40]])
    gs_uri = "gs://plugin-events/other/builds/k-gs"
    assert corpus.sync(str(in_bucket), gs_uri)["failed"] == 0
    report.write_report(in_bucket, tmp_path / "gs-report", uri=gs_uri)  # the DAG's report task, in the bucket
    assert corpus.sync(str(tmp_path / "gs-report"), f"{gs_uri}/report")["failed"] == 0
    publish_event(event_extra(str(elsewhere), docs=3, mode="dep-aware", max_tokens=512),
                  when=datetime(2026, 5, 1, 3, 0, tzinfo=timezone.utc))
    publish_event(event_extra(gs_uri, docs=4), when=datetime(2026, 5, 2, 3, 0, tzinfo=timezone.utc))
    publish_event(event_extra(str(elsewhere), docs=3, mode="dep-aware", max_tokens=512),  # re-published: one row
                  when=datetime(2026, 5, 3, 3, 0, tzinfo=timezone.utc))
    monkeypatch.setenv("NANODATA_REPORTS_DIR", str(root))

    listing = client.get("/")
    assert listing.status_code == 200
    assert table_rows(listing.text) == [
        ["2026-05-03 03:00 UTC", "dep-aware", "512", "3", "300", str(elsewhere)],
        ["2026-05-02 03:00 UTC", "basic", "2,048", "4", "400", gs_uri],
        ["–", "–", "–", "–", "–", f"{root}/builds/k-root"]]
    local_link = f"uri/local{elsewhere}/"
    assert f'href="{local_link}"' in listing.text and 'href="uri/gs/plugin-events/other/builds/k-gs/"' in listing.text
    assert 'href="builds/builds/k-root/"' in listing.text

    r = client.get(f"/{local_link.rstrip('/')}")
    assert r.status_code == 307 and r.headers["location"] == "k-local/"
    assert client.get(f"/{local_link}report.json").json()["docs"] == 3  # written in place, as for builds under root
    page = client.get("/uri/gs/plugin-events/other/builds/k-gs/")
    assert page.status_code == 200 and f"<th>build</th><td>{gs_uri}</td>" in page.text  # the URI, not a temp dir
    assert page.content == storage.read_bytes(f"{gs_uri}/report/index.html")  # the DAG's report, as is
    assert client.get("/uri/gs/plugin-events/other/builds/k-gs/docs_by_kind.svg").text.startswith("<svg")
    for bad in ("/uri/gs/plugin-events/other/builds/k-gs/manifest.json", "/uri/local/etc/index.html",
                "/uri/gs/plugin-events/other/builds/nope/index.html", f"/uri/local{tmp_path}/b/index.html"):
        assert client.get(bad).status_code == 404, bad


def test_old_report_format_is_rewritten(client, tmp_path, monkeypatch):
    """A report written by an earlier version (other plots) is rewritten rather than served with broken images."""
    root = tmp_path / "dest"
    build = write_built_corpus(root / "builds" / "k1", [[3, 4, 5], [6]])
    report.write_report(build)
    old = json.loads((build / "report" / "report.json").read_text())
    old["format"] = 1
    (build / "report" / "report.json").write_text(json.dumps(old))
    monkeypatch.setenv("NANODATA_REPORTS_DIR", str(root))
    assert client.get("/builds/builds/k1/report.json").json()["format"] == figures.REPORT_FORMAT
