"""The Airflow web UI in a real browser: Debian's chromium driven by playwright against the api-server of a real
deployment (Postgres metadata DB; scheduler, dag-processor, api-server and triggerer as separate processes).

Logs in through the login page, opens the corpus DAG's trigger form, fills in a local source and destination,
triggers, waits for the run to succeed, finds the build in Browse → Corpus reports with the counts latest.json
holds, opens its report and checks its plots rendered; then triggers with a destination whose bucket name is
invalid and reads the one-line reason in the first task's log page. Screenshots of every step are saved in a
temporary dir, then copied to test-artifacts/browser/ in the repo (git-ignored), also when a test fails: a
failing step adds a FAILED-*.png of the page it failed on.

Chromium comes from apt (`make test` installs it when /usr/bin/chromium is missing), not from playwright's own
browser download.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from urllib.parse import quote, unquote

import pytest
from airflow_deploy import ADMIN, AirflowDeployment, airflow_env, postgres_database, run_airflow

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra: make setup")

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "browser"
DAG_ID = "nanodata_cpp_corpus"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
TIMEOUT_MS = 30_000  # one UI step (a page load, a click) on a busy 2-core machine
PLOTS = ("doc_tokens.svg", "docs_by_kind.svg", "docs_by_project.svg", "shard_sizes.svg", "crop_fraction.svg")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("deploy_services")]  # PostgreSQL: ours if none
sync_api.expect.set_options(timeout=TIMEOUT_MS)


def write_cpp_source(root: Path) -> Path:
    """tests/dags/dag_data.py's C++ tree: two projects and a JSONL file (one of its records a duplicate)."""
    module = sys.modules.get("dag_data")
    if module is None:
        spec = importlib.util.spec_from_file_location("dag_data", REPO / "tests" / "dags" / "dag_data.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.write_cpp_source(root)


class Screenshots:
    """Numbered screenshots in a temporary dir; `publish` puts them in test-artifacts/browser/."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.count = 0

    def take(self, target, name: str, **kwargs) -> Path:
        """A screenshot of a page or of one element (a locator)."""
        self.count += 1
        path = self.tmp / f"{self.count:02d}-{name}.png"
        target.screenshot(path=path, **kwargs)
        return path

    def publish(self) -> None:
        """Replace test-artifacts/browser/ with this run's screenshots, whole (staged, then renamed: a run
        beside this one does not mix its pictures in)."""
        staging = ARTIFACTS.with_name(f".{ARTIFACTS.name}-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(self.tmp, staging)
        staging.chmod(0o755)  # a pytest temp dir's mode is 0700
        shutil.rmtree(ARTIFACTS, ignore_errors=True)
        staging.rename(ARTIFACTS)

    @contextlib.contextmanager
    def on_failure(self, page, name: str):
        """Take FAILED-<name>.png of the page when the block fails, then re-raise."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.take(page, f"FAILED-{name}", full_page=True)
            raise


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A LocalExecutor deployment of the repo's dags/ and plugins/, its own metadata DB; no scheduled runs
    (a triggered run is the one under test). Yields it with the reports root (NANODATA_REPORTS_DIR)."""
    home = tmp_path_factory.mktemp("browser-airflow-home")
    reports = tmp_path_factory.mktemp("browser-reports")
    with postgres_database() as db_url:
        env = airflow_env(home, db_url, executor="LocalExecutor", dags_folder=REPO / "dags",
                          plugins_folder=REPO / "plugins",
                          extra={"NANODATA_REPORTS_DIR": str(reports),
                                 "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"})
        run_airflow(["db", "migrate"], env)
        run_airflow(["pools", "set", "gcs", "2", "nanodata GCS transfers"], env)
        with AirflowDeployment(env, [["scheduler"], ["dag-processor"], ["api-server"], ["triggerer"]]) as af:
            af.wait_for_dag(DAG_ID)
            af.reports = reports
            yield af


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: `make test` installs Debian's chromium (or: sudo apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    shots = Screenshots(tmp_path_factory.mktemp("browser-screenshots"))
    yield shots
    shots.publish()  # also after a failure: its FAILED-*.png shows where


@pytest.fixture(scope="module")
def ui(deployment, browser, shots):
    """A page logged in through the login page as the deployment's admin (the browser context keeps the cookie)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    with shots.on_failure(page, "login"):
        page.goto(deployment.url)
        page.wait_for_url(re.compile(r".*/auth/login.*"))  # not logged in: the UI sends us to its login page
        sync_api.expect(page.get_by_text("Sign into Airflow")).to_be_visible()
        page.get_by_label("Username").fill(ADMIN)
        page.get_by_label("Password").fill(deployment.password)
        shots.take(page, "login")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{deployment.url}/")
        sync_api.expect(page.get_by_role("heading", name="Welcome")).to_be_visible()
        shots.take(page, "home")
    yield page
    context.close()


def param_field(dialog, label: str):
    """One Param's field of the trigger form (label, input, help and error text), by its title. (The form's
    <label for=...> does not name the text inputs' ids, so get_by_label finds nothing.)"""
    return dialog.locator("[data-scope=field][data-part=root]").filter(
        has=dialog.page.locator("label", has_text=re.compile(rf"^\s*{re.escape(label)}\b")))


def open_trigger_form(page, af):
    """The DAG page's Trigger button; the form's dialog."""
    page.goto(f"{af.url}/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger Dag").click()
    dialog = page.get_by_role("dialog")
    sync_api.expect(dialog.get_by_role("heading", name=re.compile(f"Trigger Dag.*{DAG_ID}"))).to_be_visible()
    return dialog


def trigger_from_form(page, dialog, shots, params: dict[str, str], name: str) -> str:
    """Fill in the Params by title and trigger; the new run's id (from the run page the UI then opens)."""
    for title, value in params.items():
        field = param_field(dialog, title).locator("input").first
        field.fill(value)
        sync_api.expect(field).to_have_value(value)
    shots.take(page, f"{name}-form")
    dialog.get_by_role("button", name="Advanced Options").click()  # the conf the form will send, as JSON
    button = dialog.get_by_role("button", name="Trigger", exact=True)
    button.scroll_into_view_if_needed()
    shots.take(page, f"{name}-form-conf")
    button.click()
    page.wait_for_url(re.compile(rf".*/dags/{DAG_ID}/runs/[^/]+$"))
    sync_api.expect(page.get_by_text("Dag Run Triggered").first).to_be_visible()  # the toast
    return unquote(page.url.rsplit("/", 1)[-1])


def run_api(page, af, run_id: str, suffix: str = "") -> dict:
    """GET the run (or its `suffix`) from the REST API with the browser's own login cookie."""
    r = page.request.get(f"{af.url}/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}{suffix}")
    assert r.ok, f"{r.status} {r.text()}"
    return r.json()


def wait_for_run(page, af, run_id: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        af._check_alive()
        run = run_api(page, af, run_id)
        if run["state"] in ("success", "failed"):
            return run
        time.sleep(2)
    raise AssertionError(f"run {run_id} not finished after {timeout}s\n{af.task_summary(DAG_ID, run_id)}")


def test_trigger_a_build_and_see_its_report(deployment, ui, shots, tmp_path):
    af, page = deployment, ui
    source = write_cpp_source(tmp_path / "cpp-source")
    dest = af.reports / "cpp"  # under NANODATA_REPORTS_DIR
    with shots.on_failure(page, "build"):
        form = {"Source": str(source), "Destination": str(dest), "Max tokens per doc": "256",
                "Docs per shard": "4", "Validation fraction": "0.2"}  # Param titles: values as typed
        run_id = trigger_from_form(page, open_trigger_form(page, af), shots, form, "build")
        run = run_api(page, af, run_id)
        assert run["run_type"] == "manual"
        assert {k: run["conf"][k] for k in ("source", "destination", "mode", "max_tokens", "rows_per_file",
                                            "val_fraction")} == {
            "source": str(source), "destination": str(dest), "mode": "basic", "max_tokens": 256,
            "rows_per_file": 4, "val_fraction": 0.2}  # what was typed, as typed values
        shots.take(page, "run-triggered")
        run = wait_for_run(page, af, run_id)
        assert run["state"] == "success", af.task_summary(DAG_ID, run_id)

        page.reload()  # the run page, now finished
        sync_api.expect(page.get_by_text("Success", exact=True).first).to_be_visible()
        states = {ti["task_id"]: ti["state"]
                  for ti in run_api(page, af, run_id, "/taskInstances")["task_instances"]}
        assert states["report"] == "success" and states["publish"] == "success", states
        shots.take(page, "run-success")

        latest = json.loads((dest / "latest.json").read_text())
        assert latest["uri"] == f"{dest}/builds/{latest['key']}" and latest["docs"] > 0 and latest["tokens"] > 0

        # Browse → Corpus reports: the plugin's page, embedded in the UI
        page.get_by_role("button", name="Browse").click()
        page.get_by_role("menuitem", name="Corpus reports").click()
        reports = page.frame_locator("iframe[src*='nanodata-reports']")
        sync_api.expect(reports.get_by_role("heading", name="nanodata builds")).to_be_visible()
        link = reports.get_by_role("link", name=latest["uri"], exact=True)
        row = reports.locator("tr").filter(has=link)
        sync_api.expect(row).to_have_count(1)
        cells = row.locator("td").all_inner_texts()
        assert cells[1:] == ["basic", "256", f"{latest['docs']:,}", f"{latest['tokens']:,}", latest["uri"]], cells
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", cells[0]), cells
        shots.take(page, "reports-list")

        # its report, in the same frame
        link.click()
        sync_api.expect(reports.get_by_role("heading", name="nanodata build report")).to_be_visible()
        documents = reports.locator("tr").filter(has=reports.locator("th", has_text=re.compile(r"^documents$")))
        sync_api.expect(documents.locator("td").first).to_have_text(str(latest["docs"]))
        shots.take(page, "report")
        images = reports.locator("figure img")
        srcs = images.evaluate_all("imgs => imgs.map(i => i.getAttribute('src'))")
        assert set(PLOTS) <= set(srcs), srcs
        for i, src in enumerate(srcs):
            image = images.nth(i)
            image.scroll_into_view_if_needed()
            # decoded and drawn: a broken or missing SVG leaves naturalWidth at 0
            sync_api.expect(image).to_be_visible()
            assert image.evaluate("i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0"), src
            shots.take(image, f"plot-{Path(src).stem}")
        svg = page.request.get(f"{af.url}/nanodata-reports/builds/cpp/builds/{latest['key']}/doc_tokens.svg")
        assert svg.ok and svg.headers["content-type"] == "image/svg+xml" and b"<rect" in svg.body()

        # the report on its own page, whole
        report_url = f"{af.url}/nanodata-reports/builds/cpp/builds/{latest['key']}/"
        assert report_url in [frame.url for frame in page.frames]  # where the link led the embedded page
        page.goto(report_url)
        sync_api.expect(page.get_by_role("heading", name="nanodata build report")).to_be_visible()
        shots.take(page, "report-page", full_page=True)


def test_an_invalid_destination_fails_the_run_with_a_plain_message(deployment, ui, shots, tmp_path):
    af, page = deployment, ui
    source = write_cpp_source(tmp_path / "cpp-source")
    with shots.on_failure(page, "bad-destination"):
        dialog = open_trigger_form(page, af)
        source_field = param_field(dialog, "Source")
        source_field.locator("input").fill("")  # a required Param left empty: said at the field, no trigger
        sync_api.expect(source_field.get_by_text("This field is required")).to_be_visible()
        sync_api.expect(dialog.get_by_role("button", name="Trigger", exact=True)).to_be_disabled()
        shots.take(page, "empty-source")
        run_id = trigger_from_form(page, dialog, shots, {"Source": str(source), "Destination": "gs://My-Bucket/x"},
                                   "bad-destination")
        run = wait_for_run(page, af, run_id, timeout=120)
        assert run["state"] == "failed"
        tis = {ti["task_id"]: ti for ti in run_api(page, af, run_id, "/taskInstances")["task_instances"]}
        assert tis["plan"]["state"] == "failed" and tis["plan"]["try_number"] == 1  # no retries of bad input
        assert tis["index"]["state"] == "upstream_failed"

        page.goto(f"{af.url}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/plan")
        message = page.get_by_text("destination: 'gs://My-Bucket/x': invalid bucket name 'My-Bucket'")
        sync_api.expect(message.first).to_be_visible()
        shots.take(page, "bad-destination-log")
