"""Train a byte-level BPE tokenizer on a parquet corpus with rustbpe (the nanochat recipe).

Training sees the train split's docs in order, each cut to `doc_cap` characters, until
`max_chars` characters. Merges get ids 0..M-1 and the special tokens the ids above them, so
`<|bos|>` is id M. The result is a tiktoken encoding saved to a directory that
`nanodata.tokenizer.load(DIR)` reads with no network.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from tqdm import tqdm

from nanodata.dataset import files_for_split, open_parquet, parquets_iter_batched
from nanodata.errors import NanodataError
from nanodata.ranges import DOC_CAP, MAX_CHARS, VOCAB_SIZE, flag, local_path
from nanodata.storage.files import check_output_dir
from nanodata.tokenizer import SPECIAL_TOKENS, SPLIT_PATTERN, load, save_encoding_dir

log = logging.getLogger(__name__)

MIN_VOCAB = 256 + len(SPECIAL_TOKENS)  # every byte, then the special tokens
MAX_VOCAB = 2**20  # as the nanodata_tokenizer DAG allows; rustbpe itself overflows at 2**32
# Checked after saving: byte-level BPE must give back exactly what it was given.
ROUNDTRIP_PROBES = ["Hello world! 123 4567 don't  \n\n\ttabs", "naïve café — 東京 🙂 \u200b", ""]


def text_iterator(input_dir, max_chars: int, doc_cap: int):
    """Train docs in file/row-group order, each capped at doc_cap chars, max_chars in total."""
    n_chars = 0
    for texts in parquets_iter_batched("train", data_dir=input_dir):
        for text in texts:
            text = text[:doc_cap]
            n_chars += len(text)
            yield text
            if n_chars >= max_chars:
                return


def check_roundtrip(out_dir: Path, samples: list[str]) -> None:
    load.cache_clear()  # a previous tokenizer saved to the same dir may be cached
    tok = load(str(out_dir))
    for text in ROUNDTRIP_PROBES + samples:
        if tok.decode(tok.encode(text)) != text:
            raise NanodataError(f"{out_dir}: trained tokenizer does not roundtrip {text[:60]!r}")


def check_args(input_dir, vocab_size: int, out_dir, max_chars: int, doc_cap: int) -> None:
    """Every argument, before the minutes of training: a bad --out must not surface only at the save."""
    if not MIN_VOCAB <= vocab_size <= MAX_VOCAB:
        raise NanodataError(f"--vocab-size must be between {MIN_VOCAB} (256 bytes + {len(SPECIAL_TOKENS)} special "
                            f"tokens) and {MAX_VOCAB}, not {vocab_size}")
    if max_chars < 1:
        raise NanodataError(f"--max-chars must be >= 1, not {max_chars}")
    if doc_cap < 1:
        raise NanodataError(f"--doc-cap must be >= 1, not {doc_cap}")
    for path in files_for_split("train", input_dir):  # the input exists, has train files, all readable
        open_parquet(path)
    check_output_dir(out_dir, "--out")


def train_tokenizer(input_dir: str | os.PathLike, vocab_size: int, out_dir: str | os.PathLike, *,
                    max_chars: int = 2_000_000_000, doc_cap: int = 10_000, progress: bool = True) -> Path:
    """Train on input_dir's train split and save to out_dir; returns out_dir."""
    import rustbpe

    check_args(input_dir, vocab_size, out_dir, max_chars, doc_cap)
    out_dir = Path(out_dir)
    start = time.perf_counter()
    samples = []

    def texts(bar):  # keeps a few docs aside for the roundtrip check
        for text in text_iterator(input_dir, max_chars, doc_cap):
            if len(samples) < 16:
                samples.append(text)
            bar.update(len(text))
            yield text

    bpe = rustbpe.Tokenizer()
    # the bar covers reading and counting; the merges that follow take seconds to minutes more
    with tqdm(unit="char", unit_scale=True, desc="tokenizer: reading docs", disable=not progress) as bar:
        bpe.train_from_iterator(texts(bar), vocab_size - len(SPECIAL_TOKENS), pattern=SPLIT_PATTERN)
    mergeable_ranks = {bytes(token): rank for token, rank in bpe.get_mergeable_ranks()}
    offset = len(mergeable_ranks)
    if offset + len(SPECIAL_TOKENS) < vocab_size:
        log.warning("corpus too small for --vocab-size %d: learned %d tokens + %d special", vocab_size, offset,
                    len(SPECIAL_TOKENS))
    special_tokens = {name: offset + i for i, name in enumerate(SPECIAL_TOKENS)}
    save_encoding_dir(out_dir, f"nanodata_bpe_{offset + len(SPECIAL_TOKENS)}", SPLIT_PATTERN, mergeable_ranks,
                      special_tokens, bos_token="<|bos|>")
    check_roundtrip(out_dir, samples)
    log.info("trained %d-token tokenizer in %.1fs -> %s", offset + len(SPECIAL_TOKENS),
             time.perf_counter() - start, out_dir)
    return out_dir


def configure_parser(parser) -> None:
    sub = parser.add_subparsers(dest="tokenizer_command", metavar="{train}", title="actions", required=True)
    train = sub.add_parser("train", help="train a BPE tokenizer (rustbpe, GPT-4 split pattern) on parquet docs",
                           description="Train a byte-level BPE on the train split of a parquet corpus and save "
                                       "it to a directory that loads offline (nanodata.tokenizer.load(DIR)).")
    train.formatter_class = argparse.RawDescriptionHelpFormatter
    train.epilog = ("example:\n"
                    "  nanodata tokenizer train --input data/base_data --vocab-size 32768 --out data/tokenizer\n"
                    "  nanodata pretokenize --input data/base_data --tokenizer data/tokenizer --out data/tokens")
    train.add_argument("--input", type=Path, required=True, help="directory of parquet files with a 'text' column")
    train.add_argument("--vocab-size", type=flag(VOCAB_SIZE), required=True,
                       help=f"total vocabulary incl. {len(SPECIAL_TOKENS)} special tokens (<|bos|> first)")
    train.add_argument("--out", type=local_path(), required=True, help="output directory for the tokenizer files")
    train.add_argument("--max-chars", type=flag(MAX_CHARS), default=2_000_000_000,
                       help="stop after this many training characters (default: %(default)s)")
    train.add_argument("--doc-cap", type=flag(DOC_CAP), default=10_000,
                       help="use at most this many characters of each doc (default: %(default)s)")


def run(args) -> int:
    # rustbpe logs every 1% of merges at INFO: a wall of lines unless asked for with -v
    logging.getLogger("rustbpe").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    out = train_tokenizer(args.input, args.vocab_size, args.out, max_chars=args.max_chars, doc_cap=args.doc_cap)
    tok = load(str(out))
    print(f"tokenizer: {tok.n_vocab} tokens, <|bos|> = {tok.get_bos_token_id()} -> {out}")
    return 0
