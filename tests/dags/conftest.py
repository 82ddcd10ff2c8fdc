"""A throw-away Airflow for the DAG tests: its own AIRFLOW_HOME with SQLite and this repo's dags/.

Airflow reads AIRFLOW_HOME and its database URL when first imported, so this runs at
collection time, before any test module imports airflow.
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
# Airflow's dag-processor and task runner put the dags bundle on sys.path (BundleDagBag), which is
# how the DAG files import dags/_common.py; a bare DagBag does not, so do it here too.
sys.path.append(str(REPO / "dags"))

import airflow_local  # noqa: E402

if "airflow" in sys.modules:
    raise RuntimeError("airflow was imported before tests/dags/conftest.py could point it at a test AIRFLOW_HOME")
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


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))
