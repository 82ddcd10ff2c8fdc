"""The steps of the Airflow DAGs, as plain functions: each DAG task is a one-line call of one of these.

Nothing here imports Airflow, so every step also runs (and is tested) without it. Steps hand
each other only small dicts (URIs, counts); data moves through the destination, so tasks may
run on different machines. Every step is idempotent: it first looks for its own finished
output and returns that, so a retried or cleared task never duplicates or corrupts a build.

Layout under a destination DEST (a gs://bucket/prefix or a local dir):
    DEST/latest.json                    pointer to the newest published build, written last
    DEST/builds/<key>/                  shards, manifest.json, _COMPLETE (last), report/
    DEST/.staging/<key>/                per-step intermediates of that build (inputs.json, chunks/, ...)
<key> hashes the inputs' contents and the build parameters: unchanged inputs, unchanged key.
"""

MAX_MAPPED_TASKS = 1024  # Airflow's default max_map_length; a run must never map more instances
