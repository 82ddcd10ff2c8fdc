"""docker/: the compose file and Dockerfile, checked as data (no Docker engine runs here)."""

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from airflow_deploy import unknown_airflow_env

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
AIRFLOW_SERVICES = {  # service -> the airflow sub-command it runs
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-worker": "celery worker",
    "airflow-triggerer": "triggerer",
}


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((DOCKER / "docker-compose.yaml").read_text())


def test_services(compose):
    assert set(compose["services"]) == {*AIRFLOW_SERVICES, "airflow-init", "postgres", "redis", "gcs-emulator"}
    for name, command in AIRFLOW_SERVICES.items():
        service = compose["services"][name]
        assert service["command"] == command, name
        assert "healthcheck" in service, name
        deps = service["depends_on"]
        assert deps["postgres"]["condition"] == deps["redis"]["condition"] == "service_healthy", name
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
    for name in ("postgres", "redis", "gcs-emulator"):
        assert "healthcheck" in compose["services"][name], name
    assert compose["services"]["airflow-worker"]["depends_on"]["gcs-emulator"]["condition"] == "service_healthy"


def default(value: str) -> str:
    """The value a compose `${VAR:-default}` takes when VAR is unset."""
    match = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
    return match.group(1) if match else value


def test_shared_env_is_celery_on_postgres_and_redis(compose):
    for name in [*AIRFLOW_SERVICES, "airflow-init"]:
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        assert default(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]).startswith(
            "postgresql+psycopg2://airflow:airflow@postgres/")
        assert default(env["AIRFLOW__CELERY__RESULT_BACKEND"]).startswith("db+postgresql://airflow:airflow@postgres/")
        assert default(env["AIRFLOW__CELERY__BROKER_URL"]).startswith("redis://:@redis:6379/")
        # workers on other machines must verify the api-server's task tokens: a shared, required secret
        assert re.fullmatch(r"\$\{AIRFLOW_JWT_SECRET:\?.+\}", env["AIRFLOW__API_AUTH__JWT_SECRET"])
        assert default(env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]) == "http://airflow-apiserver:8080/execution/"
        assert unknown_airflow_env(env) == [], name  # no misspelled Airflow option
        # one cache secret for every worker: a task whose secret differs from the others' stops at the first seal
        assert re.fullmatch(r"\$\{NANODATA_CACHE_SECRET:\?.+\}", env["AIRFLOW_VAR_NANODATA_CACHE_SECRET"]), name
    postgres = compose["services"]["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]) == ("airflow",) * 3
    assert compose["services"]["airflow-apiserver"]["ports"] == ["8080:8080"]


def test_dags_and_plugins_are_mounted(compose):
    for name in [*AIRFLOW_SERVICES, "airflow-init"]:
        mounts = [re.fullmatch(r"(.+?):(/[^:]+)(?::ro)?", v).groups() for v in compose["services"][name]["volumes"]]
        targets = {target: source for source, target in mounts}
        for folder in ("dags", "plugins"):
            source = targets[f"/opt/airflow/{folder}"].replace("${NANODATA_PROJ_DIR:-..}", "..")
            assert (DOCKER / source).resolve() == REPO / folder, name
    assert (REPO / "dags" / "nanodata_cpp_corpus.py").is_file()
    assert (REPO / "plugins" / "nanodata_reports.py").is_file()


def test_nanodata_env_points_at_the_emulator(compose):
    emulator = compose["services"]["gcs-emulator"]
    port = emulator["command"][emulator["command"].index("--port") + 1]
    env = compose["services"]["airflow-worker"]["environment"]
    # `-`, not `:-`: an empty STORAGE_EMULATOR_HOST in .env selects real GCS
    assert env["STORAGE_EMULATOR_HOST"] == f"${{STORAGE_EMULATOR_HOST-http://gcs-emulator:{port}}}"
    # the reports plugin lists the builds where the corpus DAG writes them
    assert env["NANODATA_REPORTS_DIR"] == env["NANODATA_CPP_DEST"]
    assert env["NANODATA_CPP_DEST"].startswith("gs://${NANODATA_BUCKET:-nanodata-demo}/")
    assert "${NANODATA_BUCKET:-nanodata-demo}" in emulator["command"]


def test_init_migrates_and_creates_the_gcs_pool(compose):
    spec = importlib.util.spec_from_file_location("nanodata_dags_common", REPO / "dags" / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)  # GCS_POOL: the pool the DAGs' transfer tasks run in
    init = compose["services"]["airflow-init"]
    assert init["environment"]["_AIRFLOW_DB_MIGRATE"] == "true"
    assert f"airflow pools set {common.GCS_POOL} " in init["command"][-1]


def test_dockerfile_extends_the_official_image_with_the_lock():
    text = (DOCKER / "Dockerfile").read_text()
    version = re.search(r"^ARG AIRFLOW_VERSION=(\S+)", text, re.M).group(1)
    assert version == importlib.metadata.version("apache-airflow")  # the image runs the Airflow the tests ran
    assert "FROM apache/airflow:${AIRFLOW_VERSION}-python3.11" in text
    assert re.search(r"pip install .*-c /opt/nanodata/requirements\.lock", text)
    for src in ("dags", "plugins", "nanodata", "requirements.lock", "pyproject.toml"):
        assert re.search(rf"^COPY .*\b{re.escape(src)}\b", text, re.M), src
        assert (REPO / src).exists(), src
    ignore = [line for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    assert ignore[0] == "*" and "!nanodata/" in ignore  # the build context leaves .venv and data behind


def test_one_image_built_from_the_repo(compose):
    for name in [*AIRFLOW_SERVICES, "airflow-init", "gcs-emulator"]:
        service = compose["services"][name]
        assert service["image"] == "${NANODATA_IMAGE_NAME:-nanodata-airflow:latest}", name
        assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}, name
    assert (DOCKER / ".." / "docker" / "Dockerfile").is_file()


def test_multi_host_override_only_publishes_ports(compose):
    override = yaml.safe_load((DOCKER / "docker-compose.multi-host.yaml").read_text())
    assert set(override["services"]) <= set(compose["services"])
    assert all(set(service) == {"ports"} for service in override["services"].values())
    assert override["services"]["postgres"]["ports"] == ["5432:5432"]


def test_lock_pins_what_the_deployment_runs_with():
    """The image installs requirements.lock: it must hold the versions the real deployment test passed with
    (celery 5.7 breaks the celery provider's worker; asyncpg is Airflow's async Postgres driver)."""
    lock = dict(line.split("==", 1) for line in (REPO / "requirements.lock").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    for package in ("celery", "asyncpg", "apache-airflow-providers-celery", "psycopg2-binary"):
        assert lock.get(package) == importlib.metadata.version(package), package
