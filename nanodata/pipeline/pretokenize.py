"""Tokenize a parquet corpus into fixed-size .npy token shards (the build-nanogpt format).

The doc stream is the val files' docs, then the train files' docs, each file in row-group
order; every doc becomes [BOS] + tokens. The stream is cut into shards of exactly
`shard_tokens` tokens (a doc may straddle two shards; the last shard is partial). The first
shard is val: `{prefix}_val_000000.npy`, then `{prefix}_train_000001.npy`, ... meta.json
records `val_file_tokens`: the --shard-tokens that makes the val shard exactly the val files.

The shard set is committed as a whole by meta.json, written last and atomically: it lists every
shard's name, split, token count, size and sha256, and what produced them (tokenizer identity,
shard size, input files). A run first removes the old meta.json, then every shard and temp file of
earlier runs, so a killed or failed run leaves a directory without meta.json, which loaders refuse,
and its re-run writes the same bytes as a clean run.

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
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from nanodata.dataset import list_parquet_files, open_parquet, read_texts, split_files
from nanodata.errors import NanodataError
from nanodata.pipeline.workers import in_this_environment, process_context
from nanodata.ranges import PROCESS_WORKERS, SHARD_TOKENS, flag, local_path
from nanodata.storage.files import atomic_output, atomic_write, check_output_dir, file_digest, fsync_dir, temp_name
from nanodata.token_shards import META_FILE, META_VERSION, SHARD_FILE
from nanodata.tokenizer import load

log = logging.getLogger(__name__)

WINDOW_PER_WORKER = 4  # row groups in flight per worker: enough to keep workers busy, bounded memory


def shard_dtype(n_vocab: int) -> np.dtype:
    """uint16 while every id fits (ids < n_vocab <= 65536), else uint32: never wrap."""
    return np.dtype(np.uint16) if n_vocab <= 2**16 else np.dtype(np.uint32)


def shard_name(prefix: str, index: int) -> str:
    return f"{prefix}_{'val' if index == 0 else 'train'}_{index:06d}.npy"


# --- worker side ----------------------------------------------------------------------------

class RowGroupTokenizer:
    """A worker: one row group in, one flat array of [BOS]+tokens per doc out. Built once per worker process (the
    tokenizer's tables are its cost), holding the one parquet file it is reading."""

    def __init__(self, tokenizer_spec: str, dtype: str):
        tokenizer = load(tokenizer_spec)
        self.encoding = tokenizer.encoding
        self.bos = np.array([tokenizer.get_bos_token_id()], np.uint32)
        self.dtype = np.dtype(dtype)
        self.path: str | None = None  # row groups arrive file by file: only the current file is kept open
        self.file = None

    def __call__(self, task: tuple[str, int]) -> tuple[np.ndarray, int]:
        path, rg_idx = task
        if path != self.path:
            self.path, self.file = path, open_parquet(Path(path))
        texts = read_texts(self.file, Path(path), rg_idx, use_threads=False)
        parts = []
        for text in texts:
            parts.append(self.bos)
            # == encode_ordinary (no special tokens parsed), but straight into a uint32 array: no list of ints
            parts.append(self.encoding.encode_to_numpy(text, disallowed_special=()))
        tokens = np.concatenate(parts) if parts else np.empty(0, np.uint32)
        return tokens.astype(self.dtype, copy=False), len(texts)


_worker: RowGroupTokenizer | None = None  # this worker process's, made by the pool's initializer


def _start_worker(*init_args) -> None:
    global _worker
    _worker = RowGroupTokenizer(*init_args)


def _tokenize_row_group(task: tuple[str, int]) -> tuple[np.ndarray, int]:
    return _worker(task)


@contextmanager
def tokenize_in_order(workers: int, init_args: tuple):
    """Yields a function mapping row-group tasks to their results, in task order.

    At most workers*WINDOW_PER_WORKER row groups are pending at once, so a slow writer
    never lets results pile up in memory. However the block ends (done, a full disk, a
    worker's error, Ctrl-C), the workers are stopped before this returns: row groups not
    started are cancelled, running ones finish, every worker exits and is joined. Not
    Pool.terminate: it kills a worker that may be sending a result, holding the result
    queue's lock, and the pool's teardown then waits on that lock for ever.
    """
    if workers == 1:
        yield lambda tasks: map(RowGroupTokenizer(*init_args), tasks)
        return
    initializer, initargs = in_this_environment(_start_worker, init_args)
    pool = ProcessPoolExecutor(workers, mp_context=process_context(), initializer=initializer, initargs=initargs)
    try:
        def ordered(tasks):
            pending = deque()
            for task in tasks:
                pending.append(pool.submit(_tokenize_row_group, task))
                if len(pending) >= workers * WINDOW_PER_WORKER:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        yield ordered
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# --- parent side: cut the ordered token stream into shards -----------------------------------

def shard_record(path: Path, split: str, tokens: int) -> dict:
    """A finished shard as meta.json lists it."""
    return {"name": path.name, "split": split, "tokens": tokens, "bytes": path.stat().st_size,
            "sha256": file_digest(path)}


def write_meta(out_dir: Path, meta: dict) -> None:
    """The commit of a shard set: written last, atomically, after every shard it lists."""
    atomic_write(out_dir / META_FILE, json.dumps(meta, indent=2) + "\n")


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
        path = self.out_dir / shard_name(self.prefix, index)
        with atomic_output(path) as f:
            np.save(f, self.buffer[:self.filled])
        self.shards.append(shard_record(path, "val" if index == 0 else "train", self.filled))
        self.filled = 0


def _check_options(shard_tokens: int, workers: int, prefix: str) -> None:
    SHARD_TOKENS.check("--shard-tokens", shard_tokens)
    PROCESS_WORKERS.check("--workers", workers)
    if not re.fullmatch(r"[\w.-]+", prefix):
        raise NanodataError(f"--prefix must be letters, digits, '_', '-' or '.', not {prefix!r}")


def _check_buffer_fits(shard_tokens: int, dtype: np.dtype) -> None:
    """The shard buffer is allocated whole: say so now rather than fail with a MemoryError later."""
    need = shard_tokens * dtype.itemsize
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if need > memory:
        raise NanodataError(f"--shard-tokens {shard_tokens}: one shard buffer is {need / 2**30:.1f} GiB of "
                            f"{dtype.name}, more than this machine's {memory / 2**30:.1f} GiB of memory")


def _row_group_tasks(files: list[Path], input_dir: Path) -> list[tuple[str, int]]:
    """(file, row group) in stream order; reading every footer first also checks every file before any work."""
    tasks, rows = [], 0
    for path in files:
        metadata = open_parquet(path).metadata
        tasks += [(str(path), rg) for rg in range(metadata.num_row_groups)]
        rows += metadata.num_rows
    if rows == 0:
        raise NanodataError(f"{input_dir}: the parquet files hold no documents")
    return tasks


def _uncommit(out_dir: Path) -> None:
    """Start a run: drop meta.json, then the shards of earlier runs and the temp files of a killed one.

    meta.json goes first, durably: from here until the new one is written the directory is no finished
    set, so a loader refuses it rather than mixing shards of two runs. Removing every old shard (any
    prefix) frees their space and leaves exactly this run's files once it commits.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = out_dir / META_FILE
    meta.unlink(missing_ok=True)
    fsync_dir(out_dir)
    for path in out_dir.iterdir():
        if SHARD_FILE.fullmatch(path.name.removesuffix(".tmp")) or path == temp_name(meta):
            path.unlink()


def _inputs(paths: list[Path]) -> list[dict]:
    return [{"name": p.name, "bytes": p.stat().st_size} for p in paths]


def pretokenize(input_dir: str | os.PathLike, tokenizer_spec: str, out_dir: str | os.PathLike, *,
                shard_tokens: int = 100_000_000, workers: int = 2, prefix: str = "tokens",
                progress: bool = True) -> dict:
    """Write token shards and meta.json to out_dir; returns the meta dict."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    _check_options(shard_tokens, workers, prefix)
    check_output_dir(out_dir, "--out")
    if not list_parquet_files(input_dir):
        raise NanodataError(f"{input_dir}: no .parquet files")
    train_files, val_files = split_files(input_dir)
    tasks = _row_group_tasks(val_files + train_files, input_dir)
    tok = load(str(tokenizer_spec))
    dtype = shard_dtype(tok.n_vocab)
    _check_buffer_fits(shard_tokens, dtype)
    val_paths = {str(p) for p in val_files}

    _uncommit(out_dir)
    writer = ShardWriter(out_dir, prefix, shard_tokens, dtype)
    start = time.perf_counter()
    n_docs = n_tokens = val_file_tokens = 0
    with tokenize_in_order(workers, (str(tokenizer_spec), dtype.str)) as tokenized, \
            tqdm(unit="tok", unit_scale=True, desc="pretokenize", disable=not progress) as bar:
        for (path, _), (tokens, docs) in zip(tasks, tokenized(tasks), strict=False):
            writer.add(tokens)
            n_docs += docs
            n_tokens += len(tokens)
            val_file_tokens += len(tokens) if path in val_paths else 0
            bar.update(len(tokens))
    writer.flush()
    if train_files and val_file_tokens != writer.shards[0]["tokens"]:
        overlap = "also holds train docs" if val_file_tokens < shard_tokens else "holds only part of the val docs"
        log.info("val shard %s (val files: %d tokens); --shard-tokens %d would split exactly", overlap,
                    val_file_tokens, val_file_tokens)
    seconds = time.perf_counter() - start
    meta = {
        "version": META_VERSION,
        "tokenizer": str(tokenizer_spec),
        "tokenizer_identity": tok.identity,
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
        "inputs": {"val": _inputs(val_files), "train": _inputs(train_files)},
        "shards": writer.shards,
    }  # no timings, paths of the output or worker count: the same input gives a byte-identical meta.json
    write_meta(out_dir, meta)
    log.info("%d docs, %d tokens (%.0f tok/s) in %d shards -> %s", n_docs, n_tokens, n_tokens / max(seconds, 1e-9),
             len(writer.shards), out_dir)
    return meta


EPILOG = """\
Every doc becomes [BOS] + tokens; val files' docs come first. Output in OUT:
  PREFIX_val_000000.npy, PREFIX_train_000001.npy, ...   exactly SHARD_TOKENS each, the last partial
  meta.json        written last: every shard's name, size, sha256; tokenizer identity, inputs, counts,
                   dtype (uint16 if the vocab fits, else uint32)
A run first removes OUT's meta.json and old shards (any prefix); a killed or failed run leaves no
meta.json and loaders refuse the directory until a re-run finishes.
Read them with nanodata.lite.DataLoaderLite(B, T, rank, world, "train", OUT).

example:
  nanodata pretokenize --input data/base_data --tokenizer cl100k_base --out data/tokens --workers 2"""


def configure_parser(parser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--input", type=local_path("directory", "copy the corpus here with `nanodata sync`"),
                        required=True, help="directory of parquet files with a 'text' column")
    parser.add_argument("--tokenizer", default="cl100k_base",
                        help="tiktoken encoding name or a dir from 'nanodata tokenizer train' (default: %(default)s)")
    parser.add_argument("--out", type=local_path(), required=True,
                        help="output directory for .npy shards and meta.json")
    parser.add_argument("--shard-tokens", type=flag(SHARD_TOKENS), default=100_000_000,
                        help="tokens per shard; the last shard is partial (default: %(default)s)")
    parser.add_argument("--workers", type=flag(PROCESS_WORKERS), default=2, help="tokenizer processes (default: %(default)s); "
                                                               "the output does not depend on it")
    parser.add_argument("--prefix", default="tokens",
                        help="shard file prefix: PREFIX_val_000000.npy, PREFIX_train_000001.npy, ...")


def run(args) -> int:
    meta = pretokenize(args.input, args.tokenizer, args.out, shard_tokens=args.shard_tokens,
                       workers=args.workers, prefix=args.prefix)
    print(f"pretokenize: {meta['docs']} docs, {meta['tokens']} tokens ({meta['dtype']}) in "
          f"{len(meta['shards'])} shard(s) -> {args.out}")
    return 0
