"""What the nanodata DAGs share: task defaults, the `gcs` pool, the Assets and the common Params.

Not a DAG file (listed in .airflowignore); the DAG files import it from the dags folder,
which Airflow puts on sys.path. Only airflow.sdk and the standard library are imported here:
DAG files are parsed every 30 s, so the heavy nanodata work is imported inside the tasks.
"""

from __future__ import annotations

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

# Deployment defaults, overridable per run from the trigger form.
CPP_DEST = os.environ.get("NANODATA_CPP_DEST", "gs://nanodata-demo/cpp")
CPP_SOURCE = os.environ.get("NANODATA_CPP_SOURCE", "/usr/include/c++")
FINEWEB_DEST = os.environ.get("NANODATA_FINEWEB_DEST", "gs://nanodata-demo/fineweb")

_URI = r"gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?|/.*"  # gs://bucket[/prefix] or an absolute path


def uri_param(default: str, title: str, description: str) -> Param:
    return Param(default, type="string", pattern=f"^({_URI})$", title=title,
                 description=description + " A gs://bucket/prefix or an absolute local path.")


def optional_uri_param(title: str, description: str) -> Param:
    return Param("", type="string", pattern=f"^({_URI}|)$", title=title, description=description)


def event_extras(triggering_asset_events) -> list[dict]:
    """The `extra` of every Asset event that triggered this run, oldest first (none for a manual run)."""
    if not triggering_asset_events:
        return []
    return [dict(e.extra or {}) for events in triggering_asset_events.values() for e in events]
