"""Tokenize a parquet corpus into fixed-size .npy token shards (the build-nanogpt format).

The doc stream is the val files' docs, then the train files' docs, each file in row-group
order; every doc becomes [BOS] + tokens. The stream is cut into shards of exactly
`shard_tokens` tokens (a doc may straddle two shards; the last shard is partial). The first
shard is val: `{prefix}_val_000000.npy`, then `{prefix}_train_000001.npy`, ... meta.json
records `val_file_tokens`: the --shard-tokens that makes the val shard exactly the val files.

Workers tokenize whole row groups; the parent writes their results strictly in stream order
with a bounded window of row groups in flight, so the output is byte-identical for any
worker count and memory stays constant (one shard buffer + the window) for any input size.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from nanodata.dataset import list_parquet_files, open_parquet, read_texts, split_files
from nanodata.errors import NanodataError
from nanodata.tokenizer import load
from nanodata.workers import process_pool

log = logging.getLogger(__name__)

META_FILE = "meta.json"
WINDOW_PER_WORKER = 4  # row groups in flight per worker: enough to keep workers busy, bounded memory


def shard_dtype(n_vocab: int) -> np.dtype:
    """uint16 while every id fits (ids < n_vocab <= 65536), else uint32: never wrap."""
    return np.dtype(np.uint16) if n_vocab <= 2**16 else np.dtype(np.uint32)


def shard_name(prefix: str, index: int) -> str:
    return f"{prefix}_{'val' if index == 0 else 'train'}_{index:06d}.npy"


# --- worker side: one row group in, one flat array of [BOS]+tokens per doc out -----------------

_worker_state: dict = {}


def _init_worker(tokenizer_spec: str, dtype: str) -> None:
    tok = load(tokenizer_spec)
    _worker_state.update(tokenizer=tok, bos=np.array([tok.get_bos_token_id()], np.uint32), dtype=np.dtype(dtype),
                         files={})


def _tokenize_row_group(task: tuple[str, int]) -> tuple[np.ndarray, int]:
    path, rg_idx = task
    files = _worker_state["files"]
    if path not in files:
        files.clear()  # row groups arrive file by file: keep only the current file open
        files[path] = open_parquet(Path(path))
    texts = read_texts(files[path], Path(path), rg_idx, use_threads=False)
    encoding = _worker_state["tokenizer"].encoding
    bos = _worker_state["bos"]
    parts = []
    for text in texts:
        parts.append(bos)
        # == encode_ordinary (no special tokens parsed), but straight into a uint32 array: no list of ints
        parts.append(encoding.encode_to_numpy(text, disallowed_special=()))
    tokens = np.concatenate(parts) if parts else np.empty(0, np.uint32)
    return tokens.astype(_worker_state["dtype"], copy=False), len(texts)


@contextmanager
def tokenize_in_order(workers: int, init_args: tuple):
    """Yields a function mapping row-group tasks to their results, in task order.

    At most workers*WINDOW_PER_WORKER row groups are pending at once, so a slow writer
    never lets results pile up in memory.
    """
    if workers == 1:
        _init_worker(*init_args)
        yield lambda tasks: map(_tokenize_row_group, tasks)
        return
    with process_pool(workers, _init_worker, init_args) as pool:
        def ordered(tasks):
            pending = deque()
            for task in tasks:
                pending.append(pool.apply_async(_tokenize_row_group, (task,)))
                if len(pending) >= workers * WINDOW_PER_WORKER:
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()
        yield ordered


# --- parent side: cut the ordered token stream into shards -----------------------------------

class ShardWriter:
    """Fills one preallocated shard buffer and writes it atomically each time it is full."""

    def __init__(self, out_dir: Path, prefix: str, shard_tokens: int, dtype: np.dtype):
        self.out_dir, self.prefix = out_dir, prefix
        self.buffer = np.empty(shard_tokens, dtype=dtype)
        self.filled = 0
        self.shards: list[dict] = []

    def add(self, tokens: np.ndarray) -> None:
        while len(tokens):
            take = min(len(tokens), len(self.buffer) - self.filled)
            self.buffer[self.filled:self.filled + take] = tokens[:take]
            self.filled += take
            tokens = tokens[take:]
            if self.filled == len(self.buffer):
                self.flush()

    def flush(self) -> None:
        if self.filled == 0:
            return
        index = len(self.shards)
        name = shard_name(self.prefix, index)
        tmp = self.out_dir / (name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                np.save(f, self.buffer[:self.filled])
            os.replace(tmp, self.out_dir / name)
        finally:
            tmp.unlink(missing_ok=True)
        self.shards.append({"name": name, "split": "val" if index == 0 else "train", "tokens": self.filled})
        self.filled = 0


def _remove_stale_shards(out_dir: Path, prefix: str, keep: set[str]) -> None:
    """Shards of an earlier, longer run with the same prefix would otherwise join this run's set."""
    pattern = re.compile(rf"{re.escape(prefix)}_(val|train)_\d{{6}}\.npy")
    for path in out_dir.iterdir():
        if pattern.fullmatch(path.name) and path.name not in keep:
            path.unlink()


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def pretokenize(input_dir: str | os.PathLike, tokenizer_spec: str, out_dir: str | os.PathLike, *,
                shard_tokens: int = 100_000_000, workers: int = 2, prefix: str = "tokens",
                progress: bool = True) -> dict:
    """Write token shards and meta.json to out_dir; returns the meta dict."""
    if shard_tokens < 1:
        raise NanodataError(f"--shard-tokens must be >= 1, not {shard_tokens}")
    if workers < 1:
        raise NanodataError(f"--workers must be >= 1, not {workers}")
    if not re.fullmatch(r"[\w.-]+", prefix):
        raise NanodataError(f"--prefix must be letters, digits, '_', '-' or '.', not {prefix!r}")
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    if not list_parquet_files(input_dir):
        raise NanodataError(f"{input_dir}: no .parquet files")
    train_files, val_files = split_files(input_dir)
    files = val_files + train_files
    tasks = [(str(path), rg) for path in files for rg in range(open_parquet(path).num_row_groups)]
    tok = load(str(tokenizer_spec))
    dtype = shard_dtype(tok.n_vocab)
    val_paths = {str(p) for p in val_files}

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / META_FILE).unlink(missing_ok=True)  # no meta.json = this dir is not a finished set
    writer = ShardWriter(out_dir, prefix, shard_tokens, dtype)
    start = time.perf_counter()
    n_docs = n_tokens = val_file_tokens = 0
    with tokenize_in_order(workers, (str(tokenizer_spec), dtype.str)) as tokenized, \
            tqdm(unit="tok", unit_scale=True, desc="pretokenize", disable=not progress) as bar:
        for (path, _), (tokens, docs) in zip(tasks, tokenized(tasks)):
            writer.add(tokens)
            n_docs += docs
            n_tokens += len(tokens)
            val_file_tokens += len(tokens) if path in val_paths else 0
            bar.update(len(tokens))
    writer.flush()
    if not writer.shards:
        raise NanodataError(f"{input_dir}: the parquet files hold no documents")
    if train_files and val_file_tokens != writer.shards[0]["tokens"]:
        overlap = "also holds train docs" if val_file_tokens < shard_tokens else "holds only part of the val docs"
        log.info("val shard %s (val files: %d tokens); --shard-tokens %d would split exactly", overlap,
                    val_file_tokens, val_file_tokens)
    _remove_stale_shards(out_dir, prefix, {s["name"] for s in writer.shards})
    seconds = time.perf_counter() - start
    meta = {
        "version": 1,
        "tokenizer": str(tokenizer_spec),
        "n_vocab": tok.n_vocab,
        "bos_token_id": tok.get_bos_token_id(),
        "dtype": dtype.name,
        "shard_tokens": shard_tokens,
        "prefix": prefix,
        "docs": n_docs,
        "tokens": n_tokens,
        "val_tokens": writer.shards[0]["tokens"],
        "val_file_tokens": val_file_tokens,
        "train_tokens": n_tokens - writer.shards[0]["tokens"],
        "inputs": {"val": [p.name for p in val_files], "train": [p.name for p in train_files]},
        "shards": writer.shards,
    }  # no timings or worker count: the same input gives a byte-identical meta.json
    _write_json(out_dir / META_FILE, meta)
    log.info("%d docs, %d tokens (%.0f tok/s) in %d shards -> %s", n_docs, n_tokens, n_tokens / max(seconds, 1e-9),
             len(writer.shards), out_dir)
    return meta


EPILOG = """\
Every doc becomes [BOS] + tokens; val files' docs come first. Output in OUT:
  PREFIX_val_000000.npy, PREFIX_train_000001.npy, ...   exactly SHARD_TOKENS each, the last partial
  meta.json                                             counts, dtype (uint16 if the vocab fits, else uint32)
Read them with nanodata.lite.DataLoaderLite(B, T, rank, world, "train", OUT).

example:
  nanodata pretokenize --input data/base_data --tokenizer cl100k_base --out data/tokens --workers 2"""


def configure_parser(parser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--input", type=Path, required=True, help="directory of parquet files with a 'text' column")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tiktoken encoding name or a dir from 'nanodata tokenizer train' (default: %(default)s)")
    parser.add_argument("--out", type=Path, required=True, help="output directory for .npy shards and meta.json")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000,
                        help="tokens per shard; the last shard is partial (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=2, help="tokenizer processes (default: %(default)s); "
                                                               "the output does not depend on it")
    parser.add_argument("--prefix", default="tokens",
                        help="shard file prefix: PREFIX_val_000000.npy, PREFIX_train_000001.npy, ...")


def run(args) -> int:
    meta = pretokenize(args.input, args.tokenizer, args.out, shard_tokens=args.shard_tokens,
                       workers=args.workers, prefix=args.prefix)
    print(f"pretokenize: {meta['docs']} docs, {meta['tokens']} tokens ({meta['dtype']}) in "
          f"{len(meta['shards'])} shard(s) -> {args.out}")
    return 0
