"""A throw-away Airflow for the tests that run it in-process (tests/dags, tests/report): its own AIRFLOW_HOME
with SQLite, this repo's dags/ and plugins/.

Airflow reads AIRFLOW_HOME and its database URL when first imported, so the conftests import this module at
collection time, before any test module imports airflow; Python imports it once, so both share one home.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import airflow_local  # noqa: E402

if "airflow" in sys.modules:
    raise RuntimeError("airflow was imported before tests/airflow_test_home.py could point it at a test AIRFLOW_HOME")
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="nanodata-airflow-test-"))
airflow_local.configure(AIRFLOW_HOME)
# Unpaused DAGs get their Asset-triggered runs queued, which lets the tests see nanodata_tokenizer scheduled.
os.environ["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"


@pytest.fixture(scope="session")
def airflow_db():
    """Metadata schema and the `gcs` pool, once per session; the home is removed afterwards."""
    airflow_local.init_db()
    yield AIRFLOW_HOME
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)
