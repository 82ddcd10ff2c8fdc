"""The deployment tests' PostgreSQL and Redis: the machine's when they answer, else started here (services.py)."""

import airflow_deploy
import pytest
import services


@pytest.fixture(scope="session")
def deploy_services():
    """PostgreSQL and Redis for a deployment, up for the session; airflow_deploy then points at them."""
    with services.postgres() as pg, services.redis_url() as url:
        airflow_deploy.PG.update(pg)
        airflow_deploy.REDIS_URL = url
        yield {"postgres": pg, "redis": url}
