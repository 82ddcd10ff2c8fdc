"""
### nanodata_tokenizer

Trains a byte-level BPE tokenizer (rustbpe, the nanochat recipe) on a built corpus and uploads it
next to the corpus, to `ROOT/tokenizers/<key>-<vocab_size>/`.

Scheduled on the `nanodata_cpp_corpus` Asset: every published corpus build triggers a run, which
reads the corpus URI from the Asset event. Triggered by hand, it uses the `corpus` Param, or
else the build `DESTINATION/latest.json` points at.
"""

from __future__ import annotations

from _common import (
    CPP_CORPUS,
    CPP_DEST,
    DAG_DEFAULTS,
    TOKENIZER,
    check_uris,
    event_extras,
    optional_uri_param,
    uri_param,
)
from airflow.sdk import Param, dag, task

from nanodata.ranges import MAX_CHARS, VOCAB_SIZE  # the CLI's ranges (a light module)


@dag(
    dag_id="nanodata_tokenizer",
    schedule=[CPP_CORPUS],
    description="Trains a BPE tokenizer on each new corpus build (or a chosen one), stored next to it",
    doc_md=__doc__,
    **DAG_DEFAULTS,
    params={
        "corpus": optional_uri_param("Corpus", "A built corpus (e.g. gs://bucket/cpp/builds/<key>). Empty: the "
                                               "triggering Asset event's corpus, else DESTINATION/latest.json."),
        "destination": uri_param(CPP_DEST, "Corpus destination", "Where latest.json is looked up when no "
                                                                 "corpus is given."),
        "vocab_size": Param(32768, type="integer", **VOCAB_SIZE.param(), title="Vocabulary size",
                            description="Tokens in the trained vocabulary, 256 bytes and 9 special tokens included."),
        "max_chars": Param(2_000_000_000, type="integer", **MAX_CHARS.param(), title="Max training characters",
                           description="Stop reading the corpus after this many characters."),
    },
)
def nanodata_tokenizer():
    @task
    def resolve(params=None, triggering_asset_events=None) -> str:
        from nanodata.jobs import derived

        check_uris(params, "corpus", "destination")
        return derived.resolve_corpus(params["corpus"], params["destination"], event_extras(triggering_asset_events))

    @task(outlets=[TOKENIZER])
    def train(corpus: str, params=None, outlet_events=None) -> dict:
        from nanodata.jobs import derived

        info = derived.train_tokenizer(corpus, params["vocab_size"], max_chars=params["max_chars"])
        outlet_events[TOKENIZER].extra = info
        return info

    train(resolve())


nanodata_tokenizer()
