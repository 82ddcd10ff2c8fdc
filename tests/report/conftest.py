"""The report tests' fixtures; the reports plugin runs against a throw-away Airflow (tests/airflow_test_home.py)."""

from airflow_test_home import airflow_db  # noqa: F401  (a fixture: the metadata DB the plugin reads events from)
from built_corpus import built  # noqa: F401  (a fixture: a built corpus with its lengths per shard)
