"""plugins/nanodata_reports.py in-process: routes, auth, and builds on local disk or in a GCS bucket.

The deployment test fetches the same pages from a real api-server; here the app is driven with
FastAPI's TestClient and Airflow's own `get_user` dependency (a logged-in user is injected only
where a test says so).
"""

import importlib.util
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from nanodata import report, storage
from built_corpus import write_built_corpus

PLUGIN = Path(__file__).resolve().parents[2] / "plugins" / "nanodata_reports.py"


@pytest.fixture(scope="module")
def plugin():
    spec = importlib.util.spec_from_file_location("nanodata_reports_under_test", PLUGIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(plugin):
    from airflow.api_fastapi.core_api.security import get_user

    plugin.app.dependency_overrides[get_user] = lambda: "test-user"
    yield TestClient(plugin.app, follow_redirects=False)
    plugin.app.dependency_overrides.clear()


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
        assert storage.sync(str(local), f"gs://reports-plugin/cpp/builds/{key}")["failed"] == 0
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
