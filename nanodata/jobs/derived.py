"""Artifacts derived from a built corpus: a trained tokenizer and .npy token shards, stored next to it.

For a corpus ROOT/builds/<key> (or any ROOT/<name>) they go to ROOT/tokenizers/<key>-<vocab_size>/
and ROOT/tokens/<key>-<tokenizer>/: siblings, not children, so syncing a corpus down for
training does not also pull its token shards. Both write _COMPLETE last and skip work when it is there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from nanodata.corpus import fetch_dir, put_dir
from nanodata.corpus.layout import is_complete, mark_complete, read_latest
from nanodata.errors import NanodataError
from nanodata.storage import is_gcs, read_json
from nanodata.storage import join_uri as join


def resolve_corpus(corpus: str | None, dest: str | None, event_extras: list[dict] = ()) -> str:
    """The corpus URI: explicit, else the newest triggering Asset event's `uri`, else DEST/latest.json."""
    if corpus:
        return corpus.rstrip("/")
    uris = [e["uri"] for e in event_extras if e and e.get("uri")]
    if uris:
        return uris[-1]
    latest = read_latest(dest) if dest else None
    if latest is None:
        raise NanodataError("corpus: give a corpus URI, or a destination holding latest.json (none found)")
    return latest.uri


def derived_uri(corpus: str, kind: str, suffix: str) -> str:
    root, name = corpus.rstrip("/").rsplit("/", 1)
    if root.endswith("/builds"):
        root = root[: -len("/builds")]
    return join(root, kind, f"{name}-{suffix}")


def _done(uri: str) -> bool:
    return is_complete(uri)


def train_tokenizer(corpus: str, vocab_size: int, *, max_chars: int, doc_cap: int = 10_000) -> dict:
    """Train a BPE tokenizer on the corpus's train split and upload it; returns its URI."""
    from nanodata.pipeline.tokenizer_train import train_tokenizer as train

    out_uri = derived_uri(corpus, "tokenizers", str(vocab_size))
    if not _done(out_uri):
        with tempfile.TemporaryDirectory(prefix="nanodata-tokenizer-") as tmp:
            data = fetch_dir(corpus, Path(tmp) / "corpus")
            out = train(data, vocab_size, Path(tmp) / "tokenizer", max_chars=max_chars, doc_cap=doc_cap)
            mark_complete(out)
            put_dir(out, out_uri)
    return {"uri": out_uri, "corpus": corpus, "vocab_size": vocab_size}


def pretokenize(corpus: str, tokenizer: str, *, shard_tokens: int, workers: int = 1) -> dict:
    """Token shards + meta.json of the corpus, uploaded; returns their URI and counts."""
    from nanodata.pipeline.pretokenize import pretokenize as run

    name = tokenizer.rstrip("/").rsplit("/", 1)[-1]
    out_uri = derived_uri(corpus, "tokens", name)
    if _done(out_uri):
        meta = read_json(join(out_uri, "meta.json"))
    else:
        with tempfile.TemporaryDirectory(prefix="nanodata-pretokenize-") as tmp:
            data = fetch_dir(corpus, Path(tmp) / "corpus")
            spec = str(fetch_dir(tokenizer, Path(tmp) / "tokenizer")) if _is_uri_dir(tokenizer) else tokenizer
            out = Path(tmp) / "tokens"
            meta = run(data, spec, out, shard_tokens=shard_tokens, workers=workers, progress=False)
            mark_complete(out)
            put_dir(out, out_uri)
    return {"uri": out_uri, "corpus": corpus, "docs": meta["docs"], "tokens": meta["tokens"],
            "shards": len(meta["shards"])}


def _is_uri_dir(spec: str) -> bool:
    """A tokenizer given as a gs:// or local directory (else it is a tiktoken encoding name)."""
    return is_gcs(spec) or Path(spec).is_dir()
