"""Small, deterministic inputs for the DAG tests, and helpers to inspect what a run left behind."""

from __future__ import annotations

import json
from pathlib import Path

UTIL_H = """#pragma once
struct Point { int x; int y; };
inline int dot(const Point& a, const Point& b) { return a.x * b.x + a.y * b.y; }
inline int norm2(const Point& p) { return dot(p, p); }
"""


def _function(i: int) -> str:
    return (f"int step_{i}(int v) {{\n    int acc = v;\n    for (int k = 0; k < {i + 3}; ++k) {{\n"
            f"        acc = acc * {i + 7} + k;\n    }}\n    return acc % {1000 + i};\n}}\n")


def write_cpp_source(root: Path) -> Path:
    """Two C++ projects and a JSONL file; one JSONL record repeats projA/util.h (a duplicate to drop)."""
    (root / "projA").mkdir(parents=True)
    (root / "projA" / "util.h").write_text(UTIL_H)
    (root / "projA" / "steps.cpp").write_text('#include "util.h"\n\n' + "\n".join(_function(i) for i in range(12)))
    (root / "projB" / "math").mkdir(parents=True)
    (root / "projB" / "math" / "vec.h").write_text("#pragma once\nstruct Vec { double x, y, z; };\n"
                                                   "double length(const Vec& v);\n")
    (root / "projB" / "math" / "vec.cpp").write_text('#include "vec.h"\n#include <cmath>\n'
                                                     "double length(const Vec& v) {\n"
                                                     "    return std::sqrt(v.x * v.x + v.y * v.y + v.z * v.z);\n}\n")
    records = [{"text": UTIL_H, "path": "util.h", "repo": "dup"},
               {"text": "int answer() { return 42; }\n", "path": "answer.cpp", "repo": "misc"},
               {"text": "template <class T> T twice(T v) { return v + v; }\n", "path": "twice.h", "repo": "misc"}]
    (root / "extra.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def run_steps(src, dest: str, params: dict, partition_mb: float = 256, buckets: int | None = None):
    """Every step of the DAG up to publish, in order, as its tasks call them: (plan result, chunk results,
    published info). buckets replaces the bucket count plan picks (the output must not depend on it)."""
    from nanodata.jobs import cpp_corpus

    planned = cpp_corpus.plan(str(src), dest, params, partition_mb=partition_mb)
    if buckets is not None:
        set_buckets(planned["stage"], buckets)
    chunk_kw = {k: params.get(k) for k in ("mode", "max_tokens", "tokenizer", "max_file_bytes")}
    chunk_kw.update({k: params[k] for k in ("dedup", "near_threshold", "reuse", "resolver") if k in params})  # else near at 0.7
    for ref in planned["parse"]:
        cpp_corpus.parse_batch(ref, **chunk_kw)
    chunks = [cpp_corpus.chunk_batch(ref, **chunk_kw) for ref in cpp_corpus.index(planned, **chunk_kw)]
    run_tail(dest, planned, params)
    return planned, chunks, cpp_corpus.publish(dest, planned["stage"], planned["key"])


def set_buckets(stage: str, buckets: int) -> None:
    """Rewrite plan.json's bucket count (before any chunk task ran), as another input size would have set it, and
    seal it again as plan does (with the suite's secret)."""
    from nanodata.storage.auth import load_secret, read_sealed_json, seal_json

    plan = read_sealed_json(f"{stage}/plan.json", load_secret(), required=True)
    seal_json(f"{stage}/plan.json", {**plan, "buckets": buckets}, load_secret())


def run_tail(dest: str, planned: dict, params: dict) -> list[dict]:
    """near-dedup (every near task), route (settle first), every bucket task, every shard task: the steps after
    chunk."""
    from nanodata.jobs import cpp_corpus
    from nanodata.ranges import SHARD_MB

    for ref in planned["near"]:
        cpp_corpus.near_batch(ref)
    refs = cpp_corpus.route(planned["stage"], planned["key"], rows_per_file=params["rows_per_file"],
                            shard_mb=params.get("shard_mb", SHARD_MB.default), val_fraction=params["val_fraction"])
    for ref in refs:
        cpp_corpus.bucket_batch(ref)
    return [cpp_corpus.shard_batch(dest, ref, tokenizer=params["tokenizer"])
            for ref in cpp_corpus.shard_refs(planned["stage"], planned["key"])]


def bucket_snapshot(bucket: str) -> dict[str, tuple]:
    """{object name: (generation, crc32c)}: any write, even of identical bytes, changes the generation."""
    from nanodata.storage import gcs_client

    return {b.name: (b.generation, b.crc32c) for b in gcs_client().list_blobs(bucket)}


def asset_events(name: str) -> list[dict]:
    """The `extra` of every event of the named Asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                .filter(AssetModel.name == name).order_by(AssetEvent.id).all())
        return [dict(r.extra) for r in rows]


def task_states(dag_run) -> dict[str, list[str]]:
    """{task_id: [state of each (mapped) instance]} of a finished run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_run.dag_id,
                                                 TaskInstance.run_id == dag_run.run_id).all()
        out: dict[str, list[str]] = {}
        for ti in sorted(tis, key=lambda t: (t.task_id, t.map_index)):
            out.setdefault(ti.task_id, []).append(str(ti.state))
        return out


def xcom_sizes(dag_run) -> dict[str, int]:
    """{task_id[map_index]: bytes of its stored return value}."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_run.dag_id,
                                               XComModel.run_id == dag_run.run_id).all()
        return {f"{r.task_id}[{r.map_index}]": len(json.dumps(r.value)) for r in rows}
