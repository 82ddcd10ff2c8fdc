"""The DAG tests run Airflow in-process against a throw-away home (tests/airflow_test_home.py)."""

import sys

import pytest
from airflow_test_home import AIRFLOW_HOME, REPO, airflow_db  # noqa: F401  (airflow_db: a fixture)

# Airflow's dag-processor and task runner put the dags bundle on sys.path (BundleDagBag), which is
# how the DAG files import dags/_common.py; a bare DagBag does not, so do it here too.
sys.path.append(str(REPO / "dags"))


@pytest.fixture(scope="session")
def dagbag(airflow_db):  # noqa: F811
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))
