"""nanodata.jobs.worker: the Celery configuration that has a worker import nanodata's build modules once. It is
Airflow's own configuration plus those imports; after them every nanodata module a corpus DAG task or a build
step imports inside its function is loaded, and no thread has started (the worker forks its tasks after it)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

from nanodata.jobs.worker import CELERY_CONFIG, PRELOADED

REPO = Path(__file__).resolve().parents[2]


def lazy_imports() -> set[str]:
    """The nanodata modules imported inside a function by the corpus DAG, its helpers and the build's steps
    (nanodata/jobs). The other DAGs run a few long tasks each (downloads, training), where an import is nothing."""
    found = set()
    other_dags = {"derived.py", "fineweb.py"}
    for path in [REPO / "dags" / "nanodata_cpp_corpus.py", REPO / "dags" / "_common.py",
                 *(p for p in REPO.glob("nanodata/jobs/*.py") if p.name not in other_dags)]:
        for function in ast.walk(ast.parse(path.read_text())):
            if isinstance(function, ast.FunctionDef):
                for node in ast.walk(function):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nanodata"):
                        found.add(node.module)
    return found


def test_it_is_airflow_s_configuration_plus_the_imports():
    assert {k: v for k, v in CELERY_CONFIG.items() if k != "imports"} == \
        {k: v for k, v in DEFAULT_CELERY_CONFIG.items() if k != "imports"}
    assert CELERY_CONFIG["imports"][-len(PRELOADED):] == PRELOADED


def test_the_preloads_load_every_module_the_tasks_import_and_start_no_thread():
    wanted = lazy_imports() - {"nanodata.jobs.worker"}
    assert "nanodata.pipeline.chunkbuild.graph" in wanted or "nanodata.jobs" in wanted  # the scan finds them
    script = ("import importlib, json, sys, threading\n"
              f"for m in {PRELOADED!r}: importlib.import_module(m)\n"
              "print(json.dumps({'threads': threading.active_count(), 'modules': sorted(sys.modules)}))")
    out = json.loads(subprocess.run([sys.executable, "-c", script], cwd=REPO, check=True, capture_output=True,
                                    text=True).stdout.splitlines()[-1])
    assert out["threads"] == 1
    assert sorted(wanted - set(out["modules"])) == []
