"""A throw-away local Airflow for tests and the demo: SQLite metadata DB, this repo's dags/ and plugins/.

Airflow reads its configuration when first imported, so `configure()` must run before any
`import airflow`; `init_db()` then creates the schema and the `gcs` pool the DAGs use.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GCS_POOL_SLOTS = 4  # concurrent GCS transfer tasks; the DAGs put every transfer in pool "gcs"


def airflow_env(home: Path, dags_folder: Path = REPO / "dags", plugins_folder: Path = REPO / "plugins") -> dict:
    """Environment for any airflow process (in-process, CLI or `airflow standalone`) using HOME."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",  # 2-core machines; the default starts 32 workers
    }


def configure(home: Path, **folders) -> None:
    """Point this process at HOME; call before importing airflow."""
    home.mkdir(parents=True, exist_ok=True)
    os.environ.update(airflow_env(home, **folders))


def init_db() -> None:
    """Create the metadata schema (idempotent) and the `gcs` pool."""
    from airflow.models.pool import Pool
    from airflow.utils.db import initdb

    initdb()
    Pool.create_or_update_pool("gcs", slots=GCS_POOL_SLOTS, description="nanodata GCS transfers",
                               include_deferred=False)


def load_dag(dag_id: str):
    """The DAG object from the configured dags folder (dag.test() needs the module-level DAG)."""
    from airflow.dag_processing.dagbag import BundleDagBag  # puts the folder on sys.path, as Airflow does

    folder = os.environ["AIRFLOW__CORE__DAGS_FOLDER"]
    bag = BundleDagBag(dag_folder=folder, bundle_path=Path(folder), bundle_name="dags-folder")
    if bag.import_errors:
        raise RuntimeError(f"DAG import errors: {bag.import_errors}")
    return bag.dags[dag_id]
