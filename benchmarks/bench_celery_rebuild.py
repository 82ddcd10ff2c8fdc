"""The nightly rebuild on a real Airflow deployment with Celery workers: a full build of a crawl, a night's changes,
the rebuild, side by side.

Deployment (tests/deploy/airflow_deploy.py): Airflow with a fresh Postgres metadata DB (the machine's server, else
one started here, tests/deploy/services.py), scheduler, dag-processor, api-server, triggerer and 2 Celery workers of
one slot each on the Redis broker (CeleryExecutor), the cache secret set as the Airflow Variable
nanodata_cache_secret through the REST API. The DAG nanodata_cpp_corpus is triggered through the REST API with
mode basic, max_tokens 16,384, partition_mb 40, the other Params at their defaults (near-dedup, cleaning on), into
a local destination.

Source (cpp_crawl.py): one `.jsonl.gz` of real C++ (the headers under /usr/include and /work/trees), 60% distinct
records, 30% near-copies, 10% exact copies, until its text holds --mb MB (default 1,000: a 1 GB crawl; env
NANODATA_BENCH_CELERY_MB). The night: 1% of the records edited, 0.1% added. Then the rebuild, into the same
destination (its cache).

Wall = the DAG run's end - start (the API's dates); task time = end - start summed over the run's task instances;
a task is mapped when its map_index >= 0; work = the seconds each step spent working as nanodata timed them (the
build report's task times), the rest of a task's time being its process, imports and hand-offs. Printed: both builds' wall and task time, the rebuild's ratios beside the
goals (wall <= 0.25x, task time <= 0.15x the full build's), each build's unmapped share of task time (goal <= 3%),
a per-task table, each Celery worker's busy time, the shard sizes and the machine's load while each build ran (1-min
load average, and the CPU busy share from /proc/stat: other jobs on the machine take part of it).

    .venv/bin/python benchmarks/bench_celery_rebuild.py [--mb 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import sys
import tempfile
import threading
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the deployment tests' real Airflow, reused: their modules import from tests/ (pytest's pythonpath) and their folder
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "deploy")]

import airflow_deploy  # noqa: E402
import services  # noqa: E402
from cpp_crawl import night, pool, write_crawl  # noqa: E402

DAG_ID = "nanodata_cpp_corpus"
SIZE_MB = float(os.environ.get("NANODATA_BENCH_CELERY_MB", "1000"))
WORKERS, SLOTS = 2, 1
CONF = {"mode": "basic", "max_tokens": 16_384, "partition_mb": 40}
GOAL_WALL, GOAL_TASK, GOAL_UNMAPPED = 0.25, 0.15, 0.03
REFERENCE = "the issue's machine, 1 GB: full build 216 s wall, 361 s task time"
RUN_TIMEOUT = 4 * 3600


class LoadSampler(threading.Thread):
    """The 1-min load average and /proc/stat's busy jiffies, every `every` seconds, until stopped."""

    def __init__(self, every: float = 2.0):
        super().__init__(daemon=True)
        self.every, self.loads, self.stop = every, [], threading.Event()
        self.first = self.last = _cpu_jiffies()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.loads.append(os.getloadavg()[0])
        self.last = _cpu_jiffies()

    def summary(self) -> str:
        self.stop.set()
        self.join()
        busy = (self.last[0] - self.first[0]) / max(1, self.last[1] - self.first[1])
        loads = self.loads or [os.getloadavg()[0]]
        return (f"machine load ({os.cpu_count()} cores): 1-min load average mean {sum(loads) / len(loads):.2f}, "
                f"max {max(loads):.2f}; CPU busy {100 * busy:.0f}% of all cores (this deployment and any other job)")


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


@contextlib.contextmanager
def deployment(work: Path, dest: str):
    """Airflow with CeleryExecutor and WORKERS Celery workers of SLOTS slots on our own queue; stopped at the end."""
    with services.postgres() as pg, services.redis_url() as redis_url:
        airflow_deploy.PG.update(pg)
        airflow_deploy.REDIS_URL = redis_url
        with airflow_deploy.postgres_database() as db_url:
            home = work / "airflow-home"
            home.mkdir()
            env = airflow_deploy.airflow_env(
                home, db_url, executor="CeleryExecutor", dags_folder=REPO / "dags", plugins_folder=REPO / "plugins",
                extra={"NANODATA_REPORTS_DIR": dest, "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False"},
                celery_node_hostnames=True)  # each task instance names the worker that ran it
            airflow_deploy.run_airflow(["db", "migrate"], env, timeout=600)
            airflow_deploy.run_airflow(["pools", "set", "gcs", "2", "nanodata GCS transfers"], env)
            queue = env["AIRFLOW__OPERATORS__DEFAULT_QUEUE"]
            components = [["scheduler"], ["dag-processor"], ["api-server"], ["triggerer"],
                          *airflow_deploy.celery_workers(queue, WORKERS, SLOTS)]
            af = airflow_deploy.AirflowDeployment(env, components)
            try:
                with af:
                    af.wait_for_dag(DAG_ID, timeout=300)
                    r = af.api("POST", "/api/v2/variables",
                               json={"key": "nanodata_cache_secret", "value": secrets.token_hex(32)})
                    assert r.status_code == 201, f"set the cache secret Variable: {r.status_code} {r.text}"
                    yield af
            finally:
                airflow_deploy.forget_queue(queue)


def build(af: airflow_deploy.AirflowDeployment, conf: dict) -> dict:
    """Trigger a run, wait for it; its wall, task instances and the machine's load meanwhile."""
    sampler = LoadSampler()
    sampler.start()
    run_id = af.trigger(DAG_ID, conf)
    af.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT)
    load = sampler.summary()
    run = af.api("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()
    start, end = _when(run["start_date"]), _when(run["end_date"])
    tis = []
    for ti in af.task_instances(DAG_ID, run_id):  # every page of them
        t0, t1 = _when(ti["start_date"]), _when(ti["end_date"])
        ran = t0 is not None and t1 is not None
        tis.append({"task": ti["task_id"], "mapped": ti["map_index"] >= 0, "state": ti["state"],
                    "host": ti["hostname"], "seconds": (t1 - t0).total_seconds() if ran else 0.0,
                    "from": (t0 - start).total_seconds() if ran else None,
                    "to": (t1 - start).total_seconds() if ran else None})
    task = sum(t["seconds"] for t in tis)
    unmapped = sum(t["seconds"] for t in tis if not t["mapped"])
    wall = (end - start).total_seconds()
    return {"run_id": run_id, "wall": wall, "task": task, "unmapped": unmapped / task, "tis": tis, "load": load,
            "idle": wall - _covered([(t["from"], t["to"]) for t in tis if t["from"] is not None])}


def _covered(intervals: list[tuple[float, float]]) -> float:
    """Seconds in the union of the intervals: while at least one task ran."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def kinds(tis: list[dict]) -> dict[str, dict]:
    """Per task id, in order of first start: mapped or not, instances that ran, seconds, first start, last end."""
    out: dict[str, dict] = {}
    for t in sorted(tis, key=lambda t: (t["from"] is None, t["from"] or 0.0)):
        k = out.setdefault(t["task"], {"mapped": t["mapped"], "n": 0, "seconds": 0.0, "from": None, "to": None})
        if t["from"] is None:
            continue  # skipped (parse in basic mode), or not run
        k["n"] += 1
        k["seconds"] += t["seconds"]
        k["from"] = t["from"] if k["from"] is None else min(k["from"], t["from"])
        k["to"] = t["to"] if k["to"] is None else max(k["to"], t["to"])
    return out


def _cells(k: dict | None, work: float | None) -> str:
    if not k or not k["n"]:
        return f"{'-':>5} {'-':>9} {'-':>7} {'-':>7} {'-':>11}"
    span = f"{k['from']:.0f}..{k['to']:.0f}"
    return (f"{k['n']:>5} {k['seconds']:>9.1f} {k['seconds'] / k['n']:>7.2f} "
            f"{'-' if work is None else f'{work:.1f}':>7} {span:>11}")


def print_tasks(full: dict, rebuild: dict) -> None:
    a, b = kinds(full["tis"]), kinds(rebuild["tis"])
    head = f"{'n':>5} {'total s':>9} {'mean s':>7} {'work s':>7} {'from..to s':>11}"
    print("per task (n: instances that ran; mapped tasks marked *; work: the step's own seconds as nanodata timed "
          f"them; from..to: seconds since the run started)\n  {'task':<14}| full build: {head} | rebuild: {head}")
    for task in dict.fromkeys([*a, *b]):
        mark = "*" if (a.get(task) or b.get(task))["mapped"] else " "
        print(f"  {task + mark:<14}|             {_cells(a.get(task), full['work'].get(task))} |"
              f"          {_cells(b.get(task), rebuild['work'].get(task))}")


def print_workers(name: str, result: dict) -> None:
    busy: dict[str, float] = {}
    for t in result["tis"]:
        if t["from"] is not None:
            busy[t["host"]] = busy.get(t["host"], 0.0) + t["seconds"]
    print(f"  {name}: " + ", ".join(f"{host} busy {s:.1f} s ({100 * s / result['wall']:.0f}% of the wall)"
                                    for host, s in sorted(busy.items())))


def print_shards(name: str, dest: str, key: str) -> None:
    from nanodata.corpus.layout import Manifest

    manifest = Manifest.from_json(json.loads((Path(dest) / "builds" / key / "manifest.json").read_text()))
    sizes = ", ".join(f"{e.name} {e.rows:,} rows {e.bytes / 1e6:.1f} MB" for e in manifest.files)
    print(f"  {name}: {len(manifest.shards)} train shards + val: {sizes}")


def work_seconds(dest: str, key: str) -> dict[str, float]:
    """{step: seconds} the steps spent working, as nanodata timed them (the build report's task times): what a task
    costs beyond them is its process, imports and hand-offs."""
    report = json.loads((Path(dest) / "builds" / key / "report" / "report.json").read_text())
    return {row["task"]: row["seconds"] for row in report.get("tasks") or []}


def print_build(name: str, result: dict, published: dict) -> None:
    reuse = published.get("reuse") or {}
    timed = {t: k["seconds"] for t, k in kinds(result["tis"]).items() if t in result["work"]}
    work, spent = sum(result["work"][t] for t in timed), sum(timed.values())
    print(f"{name}: wall {result['wall']:.1f} s, task time {result['task']:.1f} s, unmapped share "
          f"{100 * result['unmapped']:.1f}% (goal <= {100 * GOAL_UNMAPPED:.0f}%: "
          f"{'met' if result['unmapped'] <= GOAL_UNMAPPED else 'MISSED'}); {len(result['tis'])} task instances")
    print(f"  docs {published['docs']:,}, near-dup files removed {published.get('near_files_removed', 0):,}, "
          f"exact duplicate docs dropped {published.get('duplicates_dropped', 0):,}; reuse: "
          f"{reuse.get('files_reused', 0):,} files reused ({reuse.get('bytes_reused', 0) / 1e6:.1f} MB), "
          f"{reuse.get('files_chunked', 0):,} chunked ({reuse.get('bytes_chunked', 0) / 1e6:.1f} MB)")
    print(f"  tasks nanodata times ({', '.join(timed)}): {spent:.1f} s of task time, {work:.1f} s of it the steps' own "
          f"work, {spent - work:.1f} s ({100 * (spent - work) / spent:.0f}%) their processes, imports and hand-offs; "
          f"the other tasks: {result['task'] - spent:.1f} s")
    print(f"  no task running for {result['idle']:.1f} s of the wall ({100 * result['idle'] / result['wall']:.0f}%: "
          "scheduling and hand-offs between tasks)")
    print(f"  {result['load']}")


def ratio_line(what: str, full: float, rebuild: float, goal: float) -> None:
    ratio = rebuild / full
    print(f"rebuild {what}: {rebuild:.1f} s vs full build {full:.1f} s: {ratio:.3f}x | goal <= {goal}x: "
          f"{'met' if ratio <= goal else 'MISSED'} ({ratio / goal:.2f}x the goal)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=SIZE_MB, help="MB of C++ text in the crawl (default %(default)g)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nanodata-bench-celery-") as tmp:
        work = Path(tmp)
        files = pool()
        crawl = write_crawl(work / "crawl.jsonl.gz", args.mb, files)
        dest = str(work / "dest")
        conf = {"source": str(crawl.path), "destination": dest, **CONF}
        print(f"crawl: {crawl.records:,} records, {crawl.text_bytes / 1e6:,.0f} MB of C++ "
              f"({crawl.gz_bytes / 1e6:,.0f} MB .jsonl.gz): {crawl.kinds['distinct']:,} distinct, "
              f"{crawl.kinds['near']:,} near-copies, {crawl.kinds['exact']:,} exact copies, from {len(files):,} real "
              f"files")
        print(f"Airflow {_airflow_version()}, CeleryExecutor, {WORKERS} Celery workers x {SLOTS} slot; "
              f"conf {json.dumps(CONF)}; machine load before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)",
              flush=True)
        with deployment(work, dest) as af:
            full = build(af, conf)
            full_published = _latest(dest)
            full["work"] = work_seconds(dest, full_published["key"])
            changed = night(crawl, files)
            print(f"night: {changed['edited']:,} records edited, {changed['added']:,} added", flush=True)
            rebuild = build(af, conf)
            rebuild_published = _latest(dest)
            rebuild["work"] = work_seconds(dest, rebuild_published["key"])
        print_build("full build", full, full_published)
        print_build("rebuild", rebuild, rebuild_published)
        ratio_line("wall", full["wall"], rebuild["wall"], GOAL_WALL)
        ratio_line("task time", full["task"], rebuild["task"], GOAL_TASK)
        print(f"reference: {REFERENCE}; here the full build: {full['wall']:.0f} s wall, {full['task']:.0f} s task time")
        print_tasks(full, rebuild)
        print("Celery workers:")
        print_workers("full build", full)
        print_workers("rebuild", rebuild)
        print("shards:")
        print_shards("full build", dest, full_published["key"])
        print_shards("rebuild", dest, rebuild_published["key"])


def _latest(dest: str) -> dict:
    """latest.json's build info (key, docs, reuse, ...): what publish just wrote."""
    from nanodata.corpus.layout import read_latest

    return read_latest(dest).to_json()


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


if __name__ == "__main__":
    main()
