"""A real Airflow 3.3 deployment for tests: Postgres metadata DB, separate component processes, REST API v2.

`postgres_database()` creates a fresh database and drops it at the end. `AirflowDeployment` runs
scheduler, dag-processor, api-server and triggerer (plus Celery workers, see `celery_workers()`, with
CeleryExecutor) as separate process groups from one AIRFLOW_HOME, each on free ports, and stops them all
on exit, also when the test fails. Its `api()` talks to the REST API v2 with a JWT from /auth/token
(simple auth manager, one admin user whose password is generated here).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg2
import requests
from support.ports import free_port

VENV_BIN = Path(sys.executable).parent
# Set by the `deploy_services` fixture (tests/deploy/conftest.py): the machine's servers, or ones started by
# the tests (services.py). Only a database and a Redis db number of our own are ever used.
PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
REDIS_URL = "redis://127.0.0.1:6379/13"
ADMIN = "admin"
PAGE_LIMIT = 100  # the REST API's default [api] maximum_page_limit: the most items one list request returns


def _admin_connection():
    conn = psycopg2.connect(dbname="postgres", **PG)
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    return conn


@contextlib.contextmanager
def postgres_database():
    """A fresh, uniquely named database; yields its SQLAlchemy URL and drops it at the end."""
    name = f"nanodata_deploy_{uuid.uuid4().hex[:10]}"
    with contextlib.closing(_admin_connection()) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg2://{PG['user']}@{PG['host']}:{PG['port']}/{name}"
    finally:
        with contextlib.closing(_admin_connection()) as conn, conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def airflow_env(home: Path, db_url: str, *, executor: str, dags_folder: Path, plugins_folder: Path,
                extra: dict[str, str] | None = None, celery_node_hostnames: bool = False) -> dict[str, str]:
    """The environment every component shares: one config, so secrets and ports agree.

    `celery_node_hostnames`: task instances record the Celery node that ran them (worker1-<queue>@<host>) as
    their hostname, not the machine's name, which all workers of one machine share (celery_node.py).
    """
    api_port = free_port()
    # inherited AIRFLOW* settings (another test's Airflow, say) must not leak into this deployment
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__EXECUTOR": executor,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "4",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        # log servers default to fixed ports that other deployments on this machine also use
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "300",
        # a task supervisor polls this often (up to 5 s by default) and can notice only then that its finished
        # task's process exited: meanwhile the task holds its worker slot (a Celery one too) for nothing
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        "AIRFLOW__CELERY__BROKER_URL": REDIS_URL,
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + db_url,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
        # each worker imports nanodata's build modules once; its tasks, forked from it, start with them loaded
        "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "nanodata.jobs.worker.CELERY_CONFIG",
        # a queue of our own, so no other Celery worker on the shared broker takes our tasks; named after the
        # metadata DB because the serialized DAGs in it keep the queue of whichever deployment parsed them first
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": "nanodata-deploy-" + db_url.rsplit("_", 1)[-1],
    })
    if celery_node_hostnames:
        env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] = "celery_node.celery_node_hostname"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def celery_workers(queue: str, count: int = 1, concurrency: int = 2) -> list[list[str]]:
    """`airflow celery worker` components consuming only `queue`, `concurrency` task slots each.

    One worker is the Celery node <queue>@<host>; several are worker1-<queue>@<host>, worker2-... . Only the
    first serves task logs: the log-server port is one setting of the shared config (the api-server reads the
    logs of finished tasks from the shared AIRFLOW_HOME anyway).
    """
    def name(i: int) -> str:
        return f"{queue}@%h" if count == 1 else f"worker{i}-{queue}@%h"

    return [["celery", "worker", "--queues", queue, "--concurrency", str(concurrency), "--without-gossip",
             "--without-mingle", "--celery-hostname", name(i), *(["--skip-serve-logs"] if i > 1 else [])]
            for i in range(1, count + 1)]


def run_airflow(args: list[str], env: dict[str, str], timeout: float = 300) -> str:
    """Run one `airflow ...` CLI command to completion; its output, or an AssertionError with it."""
    proc = subprocess.run([str(VENV_BIN / "airflow"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


class AirflowDeployment:
    """Airflow components as separate process groups; use as a context manager."""

    def __init__(self, env: dict[str, str], components: list[list[str]]):
        self.env = env
        self.home = Path(env["AIRFLOW_HOME"])
        self.url = env["AIRFLOW__API__BASE_URL"]
        self.components = components
        self.procs: dict[str, subprocess.Popen] = {}
        self.password = secrets.token_urlsafe(16)
        self._token: str | None = None

    def __enter__(self) -> AirflowDeployment:
        (self.home / "passwords.json").write_text(json.dumps({ADMIN: self.password}))
        try:
            for args in self.components:
                name = "-".join(args)
                log = open(self.home / f"{name}.log", "wb")
                self.procs[name] = subprocess.Popen([str(VENV_BIN / "airflow"), *args], env=self.env, stdout=log,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
                log.close()  # the child holds its own copy
            self._wait_api()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM every process group, SIGKILL what is left after `grace` seconds."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):  # children of an exited leader may linger
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for proc in self.procs.values():  # killed orphans are reaped by init shortly after
            for _ in range(50):
                if not group_alive(proc.pid):
                    break
                time.sleep(0.1)

    def log_of(self, component: str) -> str:
        """The output of the component whose command starts with `component` ("scheduler", "celery", ...)."""
        name = next(n for n in self.procs if n.startswith(component))
        return (self.home / f"{name}.log").read_text(errors="replace")

    def logs(self, tail: int = 2000) -> str:
        return "\n".join(f"--- {name} (last {tail} chars) ---\n{self.log_of(name)[-tail:]}" for name in self.procs)

    def _check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        assert not dead, f"airflow components exited: {dead}\n{self.logs()}"

    def _wait_api(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            # A starting api-server may accept the connection and answer late on a loaded machine:
            # a read timeout is one more try, as a refused connection is.
            with contextlib.suppress(requests.ConnectionError, requests.Timeout):
                if requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).ok:
                    return
            time.sleep(1)
        raise AssertionError(f"api-server not healthy after {timeout}s\n{self.logs()}")

    def token(self) -> str:
        if self._token is None:
            r = requests.post(f"{self.url}/auth/token", json={"username": ADMIN, "password": self.password},
                              timeout=30)
            assert r.status_code == 201, f"/auth/token: {r.status_code} {r.text}"
            self._token = r.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, **kwargs) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token()}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> dict:
        """The DAG as the API reports it, once the dag-processor has parsed it; fails fast on import errors."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            r = self.api("GET", f"/api/v2/dags/{dag_id}")
            if r.status_code == 200:
                return r.json()
            errors = self.api("GET", "/api/v2/importErrors").json().get("import_errors", [])
            assert not errors, f"DAG import errors: {json.dumps(errors, indent=1)[:4000]}"
            time.sleep(2)
        raise AssertionError(f"DAG {dag_id} not parsed after {timeout}s\n{self.logs()}")

    def trigger(self, dag_id: str, conf: dict) -> str:
        """Unpause the DAG and start a run with this conf; returns the run id."""
        r = self.api("PATCH", f"/api/v2/dags/{dag_id}", json={"is_paused": False})
        assert r.status_code == 200, f"unpause {dag_id}: {r.status_code} {r.text}"
        r = self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert r.status_code == 200, f"trigger {dag_id}: {r.status_code} {r.text}"
        return r.json()["dag_run_id"]

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 420) -> str:
        """Poll the run to a final state; on anything but success the assertion names the failed tasks."""
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            self._check_alive()
            state = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                break
            time.sleep(2)
        assert state == "success", f"run {run_id} is {state}\n{self.task_summary(dag_id, run_id)}\n{self.logs()}"
        return state

    def task_instances(self, dag_id: str, run_id: str, page: int = PAGE_LIMIT) -> list[dict]:
        """Every task instance of the run, `page` at a time: the API returns at most [api] maximum_page_limit
        (100) whatever limit is asked for, so one request would silently drop the rest of a big run."""
        tis: list[dict] = []
        while True:
            r = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances",
                         params={"limit": page, "offset": len(tis)})  # ordered by map_index, then id: stable
            assert r.status_code == 200, f"task instances of {run_id}: {r.status_code} {r.text}"
            body = r.json()
            tis += body["task_instances"]
            if len(tis) >= body["total_entries"] or not body["task_instances"]:
                return tis

    def task_summary(self, dag_id: str, run_id: str) -> str:
        """Each task's state, and the log of every failed one (what a failed test should show)."""
        lines = []
        for ti in self.task_instances(dag_id, run_id):
            lines.append(f"{ti['task_id']}[{ti['map_index']}]: {ti['state']}")
            if ti["state"] in ("failed", "upstream_failed") and ti["try_number"]:
                r = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}"
                                    f"/logs/{ti['try_number']}", params={"map_index": ti["map_index"]},
                             headers={"Accept": "application/x-ndjson"})  # one JSON event a line
                lines.append(r.text[-4000:])
        return "\n".join(lines)


def known_airflow_options() -> set[tuple[str, str]]:
    """(section, key) of every Airflow config option (core + the celery provider): catches misspelled env vars.

    Read from the installed files without importing airflow, which would fix its AIRFLOW_HOME for the session.
    """
    import importlib.util

    import yaml

    package = Path(importlib.util.find_spec("airflow").submodule_search_locations[0])
    sections = yaml.safe_load((package / "config_templates" / "config.yml").read_text())
    spec = importlib.util.spec_from_file_location("celery_provider_info",
                                                  package / "providers" / "celery" / "get_provider_info.py")
    provider = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(provider)
    sections.update(provider.get_provider_info()["config"])
    return {(section, key) for section, spec in sections.items() for key in spec.get("options", {})}


def unknown_airflow_env(env: dict[str, str]) -> list[str]:
    known = known_airflow_options()
    return sorted(k for k in env if k.startswith("AIRFLOW__")
                  and tuple(k.lower().split("__")[1:3]) not in known)


def forget_queue(queue: str) -> None:
    """Drop the broker keys of our Celery queue (the Redis db is shared across runs)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"*{queue}*"):
        client.delete(key)
