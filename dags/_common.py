"""What the nanodata DAGs share: task defaults, the `gcs` pool, the Assets and the common Params.

Not a DAG file (listed in .airflowignore); the DAG files import it from the dags folder,
which Airflow puts on sys.path. Only airflow.sdk and the standard library are imported here:
DAG files are parsed every 30 s, so the heavy nanodata work is imported inside the tasks.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta, timezone

from airflow.sdk import Asset, ExceptionRetryPolicy, Param, RetryAction, RetryRule

GCS_POOL = "gcs"  # every GCS transfer task; created by the set-up (`airflow pools set gcs 4 ...`)
START_DATE = datetime(2026, 1, 1, tzinfo=timezone.utc)
TAGS = ["nanodata"]

DEFAULT_ARGS = {
    "owner": "nanodata",
    "retries": 3,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,  # 30 s, 60 s, 120 s: rides out a GCS or HTTP hiccup
    "max_retry_delay": timedelta(minutes=10),
    # bad input or Params (a one-line NanodataError) fail at once: another attempt cannot fix them
    "retry_policy": ExceptionRetryPolicy(rules=[RetryRule(exception="nanodata.errors.NanodataError",
                                                          action=RetryAction.FAIL, reason="bad input")]),
}

# Every nanodata DAG: no backfill; one run at a time, since runs of one build key share staging objects.
DAG_DEFAULTS = {"start_date": START_DATE, "catchup": False, "max_active_runs": 1, "default_args": DEFAULT_ARGS,
                "tags": TAGS}

# Asset URIs name the dataset, not its location: the destination is a run Param, so each event's
# `extra` carries the built URI and counts (consumers such as nanodata_tokenizer read them there).
CPP_CORPUS = Asset(name="nanodata_cpp_corpus", uri="nanodata://corpus/cpp")
FINEWEB = Asset(name="nanodata_fineweb", uri="nanodata://corpus/fineweb")
TOKENIZER = Asset(name="nanodata_tokenizer", uri="nanodata://tokenizer")
TOKEN_SHARDS = Asset(name="nanodata_token_shards", uri="nanodata://tokens")

# What the deployment builds on schedule: each setting is an Airflow Variable (its name in lower case) or,
# when that is not set, an environment variable of the workers. The trigger form's defaults come from the
# same environment variables, else from the demo's values below, which a scheduled run never builds.
CPP_SETTINGS = {"source": "NANODATA_CPP_SOURCE", "destination": "NANODATA_CPP_DEST"}
CPP_DEST = os.environ.get("NANODATA_CPP_DEST", "gs://nanodata-demo/cpp")
CPP_SOURCE = os.environ.get("NANODATA_CPP_SOURCE", "/usr/include/c++")
FINEWEB_DEST = os.environ.get("NANODATA_FINEWEB_DEST", "gs://nanodata-demo/fineweb")

# No JSON-schema `pattern` on URIs: Airflow would answer a mismatch with the raw regex. The rule is said in
# words here, and the run's first task checks it (nanodata.storage.check_uri) with a one-line error.
URI_RULE = ("An absolute local path or gs://bucket/prefix (bucket names are lowercase letters, digits, dots, "
            "dashes and underscores).")

log = logging.getLogger(__name__)


def uri_param(default: str, title: str, description: str) -> Param:
    return Param(default, type="string", minLength=1, title=title, description=f"{description} {URI_RULE}")


def optional_uri_param(title: str, description: str) -> Param:
    return Param("", type="string", title=title, description=f"{description} {URI_RULE}")


def check_uris(params, *names: str) -> dict[str, str]:
    """{name: URI} of these Params, each checked (empty optional ones pass); the first task of a run calls it."""
    from nanodata.storage import check_uri

    return {name: params[name] and check_uri(name, params[name]) for name in names}


def run_target(params, dag_run, settings: dict[str, str]) -> dict[str, str]:
    """{Param name: URI} that this run reads and writes, checked. A manual run: its Params. A scheduled run:
    the deployment's settings, never the form's defaults; with one missing, the run is skipped with a log
    line saying what to set."""
    from nanodata.storage import check_uri

    if dag_run.run_type != "scheduled":
        return check_uris(params, *settings)
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowSkipException

    values = {name: Variable.get(env.lower(), default=None) or os.environ.get(env) for name, env in settings.items()}
    missing = [name for name in settings if not values[name]]
    if missing:
        message = (f"scheduled run skipped: the deployment configures no {' and no '.join(missing)} to build. Set "
                   f"the Airflow Variable(s) {' and '.join(settings[m].lower() for m in missing)} (Admin > "
                   f"Variables) or {' and '.join(settings[m] for m in missing)} in the workers' environment; the "
                   "trigger form's defaults are for manual runs only")
        log.warning(message)
        raise AirflowSkipException(message)
    return {name: check_uri(f"configured {name}", value) for name, value in values.items()}


def log_report(report_uri: str, build_uri: str) -> None:
    """Log where a build's report is, and its URL in the Airflow UI when the reports plugin is installed."""
    from airflow.sdk.configuration import conf

    from nanodata.report.index import web_path

    log.info("report: %s", report_uri)
    plugins = conf.get("core", "plugins_folder", fallback=None)
    if plugins and os.path.isfile(os.path.join(plugins, "nanodata_reports.py")):
        base = (conf.get("api", "base_url", fallback=None) or "http://localhost:8080").rstrip("/")
        log.info("report in the Airflow UI: %s/nanodata-reports/%s", base,
                 web_path(build_uri, os.environ.get("NANODATA_REPORTS_DIR")))


def mapped_results(results) -> list:
    """A mapped task's results as a list, read by index up to their count. Iterating Airflow's lazy sequence asks
    for one past the end to find it, which the task's log shows as an `XCom not found` error on a run that
    succeeds."""
    return [results[i] for i in range(len(results))]


def event_extras(triggering_asset_events) -> list[dict]:
    """The `extra` of every Asset event that triggered this run, oldest first (none for a manual run)."""
    if not triggering_asset_events:
        return []
    return [dict(e.extra or {}) for events in triggering_asset_events.values() for e in events]
