"""
### nanodata_cpp_corpus

Builds a C++ pretraining corpus:
**plan → parse (mapped) → index → chunk (mapped) → near (mapped) → route → bucket (mapped) → shard
(mapped) → publish → report → cleanup**.

* `plan` first checks `source` and `destination` (an absolute path or gs://bucket/prefix). A scheduled (nightly)
  run builds what the deployment configured instead of the form's defaults: the Airflow Variables
  `nanodata_cpp_source` and `nanodata_cpp_dest`, else the workers' `NANODATA_CPP_SOURCE` and
  `NANODATA_CPP_DEST`; with none set it is skipped, and its log says what to set. Then it lists the source
  (top-level `*.jsonl`, `*.jsonl.gz`, `*.jsonl.zst` files, and the C++ files of the tree: each sub-directory one
  project, loose files one project), hashes their contents and derives the build key from those hashes and the
  build Params. If `builds/<key>/` is complete and `latest.json`
  points at it, nothing is mapped and the run ends. Otherwise it cuts the inputs into partitions of about
  `partition_mb` MB (big JSONL inputs into line-aligned ranges; a `.gz` read once by rapidgzip, whose seek
  index lets each chunk task read its own decompressed range; a `.zst` read once, noting its frames, each
  chunk task reading from its range's frame (a one-frame `.zst`'s later pieces decompressed into staging);
  projects grouped or split by size). A partition's size is its expected work: a record or file whose result
  the destination's cache holds weighs a tenth of its bytes, so a nightly rebuild maps a few chunk tasks.
* Global modes (cross-file, project, compilable): `parse` writes each partition's units to staging,
  `index` reduces them to one index of names and ids; `chunk` then emits each partition with it.
  Local modes (basic, dep-aware) skip parse and go straight to `chunk`. One mapped task per partition
  (batched above 1,024), so the Celery workers share one build.
* Cleaning, in the pass that reads each file (parse, or chunk in local modes), before it is chunked: `filters`
  drop generated files, long lines, non-alphabetic and encoded data (StarCoder2's rules), `decontaminate` files
  holding a benchmark item's text, `licenses` projects whose license is not listed; `redact` replaces secrets,
  emails and public IP addresses with placeholders. `plan` checks these Params in words before any work. The report's
  Cleaning section names each dropped file with its reason and figure, and gives each project's license.
* Near-dedup (`dedup` = near, the default): the pass that reads each file (parse, or chunk in local modes) also
  writes its MinHash signature (BigCode's 5-gram shingles) and LSH band keys; each mapped `near` task takes a
  group of bands and keeps the candidate pairs whose Jaccard, estimated on the full signature, reaches
  `near_threshold`; `route` first settles them: joins them into clusters, keeps one file per cluster (not under a vendoring
  directory such as third_party/ before one that is, then the first in input order) and lists the others, whose
  docs the bucket tasks drop. The removed files and the largest clusters are in the report.
* Each chunk task scatters its docs into B hash buckets of their content digest (B from the input size).
  `route` (bookkeeping) fixes the number of shards from the chunk tasks' counts; each mapped `bucket` task
  drops exact duplicates, keeping the first copy in input order, and routes docs to val or a train shard
  by a seeded hash; each mapped `shard` task sorts its docs by a seeded key and writes its parquet files
  straight into `DESTINATION/builds/<key>/`. The corpus is byte-identical for any `partition_mb` and any
  number of workers, and holds the docs `nanodata chunk` + `nanodata to-parquet` give (same train/val rule).
* `publish` writes `manifest.json`, then `_COMPLETE`, then `DESTINATION/latest.json`, and emits the
  `nanodata_cpp_corpus` Asset event (`extra`: uri, key, params, docs, tokens, shards, bytes, reuse), which
  schedules `nanodata_tokenizer`.
* `report` merges the counts each shard task made of the files it wrote (it reads no shard) with the counts per
  partition and bucket, time per task kind and, in global modes, the names ambiguous per project, writes them
  and plots to `builds/<key>/report/` and logs its URI and its
  page in the UI (**Browse → Corpus reports** lists every build).
* Nightly rebuilds cost what changed: each file's result (docs, signature, cleaning outcome; in the global modes its
  parsed units) is kept in `DESTINATION/.cache/` under its content digest and the settings, and reused by later
  builds (`reuse`, on by default); in the global modes a project is re-emitted when a file it can see changed.
  Cache entries and every file a task stages for another carry a keyed MAC made with the Airflow Variable
  `nanodata_cache_secret` (set it: Admin → Variables, 32+ random characters); one that fails it is made again by
  the task that finds it where it can be, else that task stops in one line naming it and what to delete.
  `plan` hands each tree file's digest to its task, so an unchanged file is not even read. Near-dedup, exact dedupe,
  the shuffle and the shards run over every doc: the corpus is byte-identical to a build into an empty destination.
  The chunk tasks log, and the report and the Asset event's `extra` carry, under `reuse`: files and bytes reused
  and chunked, and corrupt cache entries rebuilt.
* `cleanup` records the cache keys the build used and deletes the entries none of the last `cache_keep_runs`
  builds used, then deletes the build's staging once it is committed; a failed run keeps it, so a retry resumes.
"""

from __future__ import annotations

from _common import (
    CPP_CORPUS,
    CPP_DEST,
    CPP_SETTINGS,
    CPP_SOURCE,
    DAG_DEFAULTS,
    log_report,
    mapped_results,
    run_target,
    uri_param,
)
from airflow.sdk import Param, dag, task

from nanodata.ranges import ROWS_PER_FILE, SHARD_MB, VAL_FRACTION  # light modules: ranges and settings
from nanodata.settings import from_params, param_specs


@dag(
    dag_id="nanodata_cpp_corpus",
    schedule="0 3 * * *",  # nightly; an unchanged source makes it a no-op
    description="C++ source → function-boundary docs → parquet shards + report in DESTINATION/builds/<key>/; "
                "nightly on the configured source",
    doc_md=__doc__,
    **DAG_DEFAULTS,
    params={
        "source": uri_param(CPP_SOURCE, "Source",
                            "C++ input: a JSONL file, or a directory whose *.jsonl files and sub-directories "
                            "(one C++ project each) are chunked."),
        "destination": uri_param(CPP_DEST, "Destination",
                                 "Where builds/<key>/ and latest.json are written."),
        # the chunk settings, each declared once in nanodata.settings: type, default, bounds, title, description
        **{name: Param(**spec) for name, spec in param_specs().items()},
        "rows_per_file": Param(ROWS_PER_FILE.default, type="integer", **ROWS_PER_FILE.param(), title="Docs per shard",
                               description="Rows per parquet shard."),
        "shard_mb": Param(SHARD_MB.default, type="number", **SHARD_MB.param(), title="Shard size cap (MB)",
                          description="A shard file holds at most this many MB of docs (as JSON text; about 4x less "
                                      "as parquet). Shards are sized from the docs left after deduplication: as "
                                      "few as hold them under this cap and 'Docs per shard' each."),
        "val_fraction": Param(VAL_FRACTION.default, type="number", minimum=0, maximum=0.5, title="Validation fraction",
                              description="Fraction of docs written to val_shard.parquet."),
    },
)
def nanodata_cpp_corpus():
    @task
    def plan(params=None, dag_run=None, ti=None) -> list[dict]:
        from nanodata.jobs import cpp_corpus

        where = run_target(params, dag_run, CPP_SETTINGS)
        shards = {k: params[k] for k in ("rows_per_file", "shard_mb", "val_fraction")}
        planned = cpp_corpus.plan(where["source"], where["destination"], {**from_params(params), **shards},
                                  partition_mb=params["partition_mb"], cache_secret=_cache_secret())
        ti.xcom_push(key=PLANNED, value={**planned, **where})  # what index, near and the tail read
        return planned["parse"]  # what parse maps: [] in local modes and for an up-to-date build (parse skipped)

    @task
    def near_batches(planned: dict, chunked: list[dict]) -> list[dict]:
        return planned["near"]  # [] without near-dedup: near is then skipped

    @task
    def parse(batch: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.parse_batch(batch, cache_secret=_cache_secret(), **from_params(params))

    @task(trigger_rule="none_failed_min_one_success")  # runs when parse was skipped (local modes), not plan
    def index(planned: dict, params=None) -> list[dict]:
        from nanodata.jobs import cpp_corpus

        # the chunk Params: a staged unit store that fails its seal is parsed again here
        return cpp_corpus.index(planned, cache_secret=_cache_secret(), **from_params(params))

    @task
    def chunk(batch: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.chunk_batch(batch, cache_secret=_cache_secret(), **from_params(params))

    @task
    def near(batch: dict) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.near_batch(batch, cache_secret=_cache_secret())

    # after near too, which is skipped without near-dedup; skipped itself when chunk was (an up-to-date build)
    @task(trigger_rule="none_failed_min_one_success")
    def route(batches: list[dict], params=None) -> list[dict]:
        from nanodata.jobs import cpp_corpus

        batches = mapped_results(batches)
        first = batches[0]
        return cpp_corpus.route(first["stage"], first["key"], rows_per_file=params["rows_per_file"],
                                shard_mb=params["shard_mb"], val_fraction=params["val_fraction"],
                                cache_secret=_cache_secret())

    @task
    def bucket(batch: dict) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.bucket_batch(batch, cache_secret=_cache_secret())

    @task
    def shard_batches(buckets: list[dict]) -> list[dict]:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.shard_refs(buckets[0]["stage"], buckets[0]["key"], cache_secret=_cache_secret())

    @task  # not in the `gcs` pool: shard tasks are the tail's compute and must spread over every worker
    def shard(batch: dict, where: dict, params=None) -> dict:  # where: plan's whole result, the run's URIs in it
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.shard_batch(where["destination"], batch, tokenizer=params["tokenizer"],
                                      cache_secret=_cache_secret())

    @task(outlets=[CPP_CORPUS])
    def publish(shards: list[dict], where: dict, outlet_events=None) -> dict:
        from nanodata.jobs import cpp_corpus

        info = cpp_corpus.publish(where["destination"], shards[0]["stage"], shards[0]["key"],
                                  cache_secret=_cache_secret())
        outlet_events[CPP_CORPUS].extra = info
        return {**info, "stage": shards[0]["stage"]}

    @task
    def report(published: dict, where: dict, params=None) -> str:
        from nanodata.report.build_stats import report_extras
        from nanodata.report.corpus_report import report_build

        uri = report_build(published["uri"], tokenizer=params["tokenizer"], max_tokens=params["max_tokens"],
                           **report_extras(published["stage"], cache_secret=_cache_secret()))
        log_report(uri, published["uri"])
        return published["key"]

    @task
    def cleanup(key: str, where: dict, params=None) -> dict:
        from nanodata.jobs import cpp_corpus

        return cpp_corpus.cleanup(where["destination"], key, params["cache_keep_runs"], params["cache_grace_hours"],
                                  cache_secret=_cache_secret())

    parse_refs = plan()
    planned = parse_refs[PLANNED]  # plan's other XCom: the whole plan and the run's URIs
    indexed = index(planned)
    parse.expand(batch=parse_refs) >> indexed
    chunked = chunk.expand(batch=indexed)
    routed = route(chunked)
    near.expand(batch=near_batches(planned, chunked)) >> routed
    bucketed = bucket.expand(batch=routed)
    sharded = shard.partial(where=planned).expand(batch=shard_batches(bucketed))
    cleanup(report(publish(sharded, planned), planned), planned)


PLANNED = "planned"  # the XCom key of plan's whole result (its return value is the parse batches, which parse maps)


CACHE_SECRET = "nanodata_cache_secret"  # the Airflow Variable holding the secret that authenticates cache and staging


def _cache_secret() -> str | None:
    """The deployment's cache secret (the Airflow Variable CACHE_SECRET), read in the task that needs it and handed
    to the library, never returned (XCom) nor logged. Unset: the workers' NANODATA_CACHE_SECRET, else each worker's
    own secret file (nanodata.storage.auth): right for one worker; with several, set the Variable, or each worker's
    cache entries are a miss to the others and its staged files fail their seals there (made again, or the task
    stops in one line: never a wrong corpus)."""
    from airflow.sdk import Variable

    return Variable.get(CACHE_SECRET, default=None)


nanodata_cpp_corpus()
