"""The deployment tests' own PostgreSQL and Redis (services.py), started as on a machine with none: the
addresses to look at first are unused ports, so this path runs in every `make test`, CI's included."""

import contextlib
import uuid

import psycopg2
import redis
import services
from support.ports import free_port


def test_servers_are_started_when_nothing_answers(monkeypatch):
    unused = f"127.0.0.1:{free_port()}"
    monkeypatch.setattr(services, "PG_ADDRESS", unused)
    monkeypatch.setattr(services, "REDIS_ADDRESS", f"127.0.0.1:{free_port()}")
    with services.postgres() as pg, services.redis_url() as url:
        assert f"{pg['host']}:{pg['port']}" != unused and pg["host"] == "127.0.0.1"
        name = f"nanodata_probe_{uuid.uuid4().hex[:8]}"  # a database of our own, as the deployment tests make
        with contextlib.closing(psycopg2.connect(dbname="postgres", **pg)) as conn:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}"')
        with contextlib.closing(psycopg2.connect(dbname=name, **pg)) as conn, conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
        client = redis.Redis.from_url(url)
        assert client.ping() and client.set("nanodata-probe", "1")
        client.close()
        pg_port, redis_port = pg["port"], int(url.rsplit(":", 1)[1].split("/")[0])
    # stopped at the end: nothing answers there any more
    assert not services.answers("127.0.0.1", pg_port) and not services.answers("127.0.0.1", redis_port)
