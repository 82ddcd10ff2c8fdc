"""
### nanodata_pretokenize

Tokenizes a built corpus into fixed-size `.npy` token shards (each doc `[BOS] + tokens`, first shard
val) for the DataLoaderLite path, uploaded next to the corpus to `ROOT/tokens/<key>-<tokenizer>/`
with `meta.json` and `_COMPLETE`. Emits the `nanodata_token_shards` Asset.
"""

from __future__ import annotations

from _common import CPP_DEST, DAG_DEFAULTS, TOKEN_SHARDS, check_uris, event_extras, optional_uri_param, uri_param
from airflow.sdk import Param, dag, task

from nanodata.ranges import PROCESS_WORKERS, SHARD_TOKENS  # the CLI's ranges (a light module)


@dag(
    dag_id="nanodata_pretokenize",
    schedule=None,
    description="Tokenizes a corpus build into .npy token shards for DataLoaderLite",
    doc_md=__doc__,
    **DAG_DEFAULTS,
    params={
        "corpus": optional_uri_param("Corpus", "A built corpus (e.g. gs://bucket/cpp/builds/<key>). Empty: the one "
                                               "DESTINATION/latest.json points at."),
        "destination": uri_param(CPP_DEST, "Corpus destination", "Where latest.json is looked up when no "
                                                                 "corpus is given."),
        "tokenizer": Param("cl100k_base", type="string", minLength=1, title="Tokenizer",
                           description="A tiktoken name, or the URI of a tokenizer trained by nanodata_tokenizer."),
        "shard_tokens": Param(100_000_000, type="integer", **SHARD_TOKENS.param(), title="Tokens per shard",
                              description="Every shard but the last holds exactly this many tokens."),
        "workers": Param(2, type="integer", **PROCESS_WORKERS.param(), title="Worker processes",
                         description="Tokenizer processes; the output is identical for any count."),
    },
)
def nanodata_pretokenize():
    @task
    def resolve(params=None, triggering_asset_events=None) -> str:
        from nanodata.jobs import derived

        check_uris(params, "corpus", "destination")
        return derived.resolve_corpus(params["corpus"], params["destination"], event_extras(triggering_asset_events))

    @task(outlets=[TOKEN_SHARDS])
    def pretokenize(corpus: str, params=None, outlet_events=None) -> dict:
        from nanodata.jobs import derived

        info = derived.pretokenize(corpus, params["tokenizer"], shard_tokens=params["shard_tokens"],
                                   workers=params["workers"])
        outlet_events[TOKEN_SHARDS].extra = info
        return info

    pretokenize(resolve())


nanodata_pretokenize()
