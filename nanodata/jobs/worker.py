"""What an Airflow Celery worker loads once for nanodata's DAGs. Set `[celery] celery_config_options` (env
AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS) to `nanodata.jobs.worker.CELERY_CONFIG`: Airflow's own Celery configuration,
plus the modules the corpus build's tasks import, imported when the worker starts.

Airflow forks each task's process from the worker, so the tasks start with these modules loaded; Airflow preloads
its own operators the same way (its celery_import_modules hook). Without it every task imports them again, about
half a second each: a nightly rebuild's twenty-odd tasks then spend more on imports than on their bookkeeping.
Importing these starts no thread and opens nothing, so forking after it is safe.
"""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

PRELOADED = (
    "nanodata.jobs.cpp_corpus",            # every step of the corpus DAG
    "nanodata.jobs.tail",                  # route, bucket, shard, publish
    "nanodata.pipeline.chunkbuild.graph",  # parse, chunk, index, near: the chunker, its workers, the cache
    "nanodata.pipeline.chunkbuild.config",
    "nanodata.pipeline.cleaning.stages",   # the filters and the redactor a chunk task builds
    "nanodata.report.build_stats",         # report
    "nanodata.report.corpus_report",
    "nanodata.report.index",               # the report's page in the UI
)

CELERY_CONFIG = {**DEFAULT_CELERY_CONFIG,
                 "imports": (*DEFAULT_CELERY_CONFIG.get("imports", ()), *PRELOADED)}
