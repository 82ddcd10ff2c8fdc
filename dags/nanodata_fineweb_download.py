"""
### nanodata_fineweb_download

Downloads pretraining parquet shards (FineWeb-Edu, as nanochat uses) over HTTP into DESTINATION:
**plan → download (mapped over batches of shards, pool `gcs`) → finalize**. Each shard is retried,
checked (a parquet file with a string `text` column) and uploaded; shards already in DESTINATION
are skipped, so re-runs resume. `finalize` writes `_COMPLETE` and emits the `nanodata_fineweb` Asset.
"""

from __future__ import annotations

from _common import DAG_DEFAULTS, FINEWEB, FINEWEB_DEST, GCS_POOL, check_uris, mapped_results, uri_param
from airflow.sdk import Param, dag, task

from nanodata.ranges import NUM_SHARDS, THREAD_WORKERS  # the CLI's ranges (a light module)

BATCHES = 64  # mapped tasks per run: each downloads num_shards / 64 shards with `workers` threads


@dag(
    dag_id="nanodata_fineweb_download",
    schedule=None,
    description="Pretraining parquet shards (FineWeb-Edu) over HTTP into DESTINATION: verified, resumable",
    doc_md=__doc__,
    **DAG_DEFAULTS,
    params={
        "base_url": Param("https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main",
                          type="string", minLength=1, title="Base URL",
                          description="An http:// or https:// URL; shards are fetched from "
                                      "BASE_URL/shard_00000.parquet, ..."),
        "num_shards": Param(8, type="integer", **NUM_SHARDS.param(), title="Shards",
                            description="Download shards 0 .. num_shards-1 (nanochat: the last is val)."),
        "workers": Param(4, type="integer", **THREAD_WORKERS.param(), title="Threads per task",
                         description="Parallel downloads inside each mapped task."),
        "destination": uri_param(FINEWEB_DEST, "Destination", "Where the shards and _COMPLETE are written."),
    },
)
def nanodata_fineweb_download():
    @task
    def plan(params=None) -> list[list[int]]:
        from nanodata.jobs import fineweb
        from nanodata.pipeline.download import check_base_url

        check_base_url(params["base_url"])  # Params are checked in words here, not by a regex in the form
        check_uris(params, "destination")
        return fineweb.plan(params["num_shards"], max_batches=BATCHES)

    @task(pool=GCS_POOL)
    def download(shards: list[int], params=None) -> dict:
        from nanodata.jobs import fineweb

        return fineweb.download_batch(params["base_url"], shards[0], shards[1], params["destination"],
                                      workers=params["workers"])

    @task(outlets=[FINEWEB])
    def finalize(batches: list[dict], params=None, outlet_events=None) -> dict:
        from nanodata.jobs import fineweb

        info = fineweb.finalize(params["destination"], params["num_shards"], mapped_results(batches))
        outlet_events[FINEWEB].extra = info
        return info

    finalize(download.expand(shards=plan()))


nanodata_fineweb_download()
