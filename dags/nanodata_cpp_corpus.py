"""
### nanodata_cpp_corpus

Builds a C++ pretraining corpus: **plan → chunk (mapped) → merge → to_parquet → upload → publish → report**.

* `plan` lists the source (top-level `*.jsonl` files and project directories), hashes their contents
  and derives the build key from those hashes and the build Params. If `builds/<key>/` is complete
  and `latest.json` points at it, nothing is mapped and the run ends: no chunking, no upload.
* `chunk` is mapped over batches of inputs (one input per task, batched above 1,024 inputs).
* `upload` copies shards, `manifest.json`, then `_COMPLETE` to `DESTINATION/builds/<key>/`;
  `publish` then writes `DESTINATION/latest.json` and emits the `nanodata_cpp_corpus` Asset event
  (`extra`: uri, key, docs, tokens, shards, bytes), which schedules `nanodata_tokenizer`.
* `report` writes counts and plots to `builds/<key>/report/` (shown by the nanodata reports plugin).
"""

from __future__ import annotations

from _common import CPP_CORPUS, CPP_DEST, CPP_SOURCE, DAG_DEFAULTS, GCS_POOL, uri_param
from airflow.sdk import Param, dag, task

MODES = ["basic", "dep-aware", "cross-file", "project", "compilable"]  # nanodata.chunking.modes.MODES


def _build_params(params) -> dict:
    """The Params that change the output: part of the build key."""
    return {k: params[k] for k in ("mode", "max_tokens", "tokenizer", "rows_per_file", "val_fraction")}


@dag(
    dag_id="nanodata_cpp_corpus",
    schedule="0 3 * * *",  # nightly; an unchanged source makes it a no-op
    doc_md=__doc__,
    **DAG_DEFAULTS,
    params={
        "source": uri_param(CPP_SOURCE, "Source",
                            "C++ input: a JSONL file, or a directory whose *.jsonl files and sub-directories "
                            "(one C++ project each) are chunked."),
        "destination": uri_param(CPP_DEST, "Destination",
                                 "Where builds/<key>/ and latest.json are written."),
        "mode": Param("basic", type="string", enum=MODES, title="Chunking mode",
                      description="basic: tree-sitter units; dep-aware: callees first; cross-file: pull callees "
                                  "from other files; project: files in include order; compilable: "
                                  "types then functions in dependency order."),
        "max_tokens": Param(2048, type="integer", minimum=64, maximum=131072, title="Max tokens per doc",
                            description="Docs longer than this are split at function boundaries."),
        "tokenizer": Param("cl100k_base", type="string", minLength=1, title="Tokenizer",
                           description="Counts tokens for max_tokens: a tiktoken name or a tokenizer dir."),
        "rows_per_file": Param(50000, type="integer", minimum=1, title="Docs per shard",
                               description="Rows per parquet shard."),
        "val_fraction": Param(0.01, type="number", minimum=0, maximum=0.5, title="Validation fraction",
                              description="Fraction of docs written to val_shard.parquet."),
    },
)
def nanodata_cpp_corpus():
    @task
    def plan(params=None) -> list[dict]:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.plan(params["source"], params["destination"], _build_params(params))

    @task
    def chunk(batch: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.chunk_batch(params["destination"], batch["key"], batch["batch"], mode=params["mode"],
                                      max_tokens=params["max_tokens"], tokenizer=params["tokenizer"])

    @task
    def merge(batches: list[dict], params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.merge(params["destination"], batches[0]["key"])

    @task
    def to_parquet(merged: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.to_parquet(params["destination"], merged["key"], rows_per_file=params["rows_per_file"],
                                     val_fraction=params["val_fraction"])

    @task(pool=GCS_POOL)
    def upload(parquet: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.upload(params["destination"], parquet["key"])

    @task(outlets=[CPP_CORPUS])
    def publish(uploaded: dict, params=None, outlet_events=None) -> dict:
        from nanodata.jobs import cpp_corpus

        info = cpp_corpus.publish(params["destination"], uploaded["key"])
        outlet_events[CPP_CORPUS].extra = info
        return info

    @task
    def report(published: dict, params=None) -> str:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.report(params["destination"], published["key"], tokenizer=params["tokenizer"])

    batches = chunk.expand(batch=plan())
    report(publish(upload(to_parquet(merge(batches)))))


nanodata_cpp_corpus()
