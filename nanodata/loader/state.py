"""Resume states: what a loader's state records, and the checks that refuse one it cannot continue exactly.

A state (small JSON, about 16 bytes per buffered doc) holds
  - what the batches depend on, the loader's settings: loader kind, B, T and for best-fit buffer_size, crop and
    tokenizer_batch_size; split, streaming, rank, world_size and the tokenizer's identity. Resuming under
    another value is an error naming the setting and both values;
  - the position: nanochat's pq_idx, rg_idx, epoch; the exact source cursor; in streaming, the epoch's listing;
  - the files it names (the buffered docs' files and the cursor's file) as [slot, name, bytes, footer, crc32c]:
    size, digest of the parquet footer, crc32c from manifest.json (null when unlisted), so that a file rewritten
    since is refused (the source compares them, as it can read the files);
  - the buffered docs, as [slot, row group, row] plus an offset for a requeued tail (best-fit) or for the
    tokens of the first doc already used (concatenation).
nanochat's state is exactly {pq_idx, rg_idx, epoch}: it resumes approximately, as published. Any other state
without a version, or with a missing, extra or ill-typed key, is refused by a one-line ValueError naming the key.

Rank and world size are checked like any setting, in `check_state`: that is where an elastic resume (all
ranks' states, another world size) would go, since each state holds its rank's exact cursor and buffer.
"""

from __future__ import annotations

import reprlib

import tiktoken

from nanodata.tokenizer import Tokenizer

STATE_VERSION = 2
NANOCHAT_KEYS = ("pq_idx", "rg_idx", "epoch")
POSITION_KEYS = (*NANOCHAT_KEYS, "cursor", "cursor_file", "epoch_has_docs", "files", "buffer")
STREAMING_KEYS = ("epoch_files", "pass_start")
FINGERPRINT = ("bytes", "footer", "crc32c")  # of each file in `files`, after its slot and name


def tokenizer_identity(tokenizer) -> str | None:
    """What a state records of the tokenizer: its `identity` (nanodata's Tokenizer); else the same digest of
    the tiktoken encoding it wraps (`.enc` as nanochat's tokenizer, or `.encoding`) and its BOS token; else
    None: such a tokenizer cannot be told apart, so its states resume only under another one without identity."""
    identity = getattr(tokenizer, "identity", None)
    if identity is not None:
        return str(identity)
    for attribute in ("enc", "encoding"):
        encoding = getattr(tokenizer, attribute, None)
        if isinstance(encoding, tiktoken.Encoding):
            bos = encoding.decode_single_token_bytes(tokenizer.get_bos_token_id()).decode()
            return Tokenizer(encoding, bos, "").identity
    return None


def check_state(state, settings: dict) -> bool:
    """Check a resume state against the loader's settings: True for nanochat's state (approximate resume),
    False for a nanodata state that can be continued exactly, if its files are unchanged."""
    if not isinstance(state, dict):
        raise ValueError(f"resume_state_dict must be a dict, a state yielded by a nanodata loader or nanochat's "
                         f"{{pq_idx, rg_idx, epoch}}, not {type(state).__name__}")
    if "version" not in state:
        if set(state) != set(NANOCHAT_KEYS):
            raise ValueError(f"resume_state_dict has no 'version', so it is not a nanodata state, and it is not "
                             f"nanochat's, which has exactly the keys pq_idx, rg_idx, epoch (it has {_keys(state)})")
        _check_nanochat_position(state)
        return True
    version = state["version"]
    if type(version) is not int or version != STATE_VERSION:
        raise ValueError(f"resume_state_dict has version {reprlib.repr(version)}; this loader reads version "
                         f"{STATE_VERSION} (pass only its pq_idx, rg_idx, epoch for nanochat's approximate resume)")
    for key, ours in settings.items():
        _check_setting(key, _get(state, key), ours)
    keys = ("version", *settings, *POSITION_KEYS, *(STREAMING_KEYS if settings["streaming"] else ()))
    for key in keys:
        _get(state, key)
    unexpected = set(state) - set(keys)
    if unexpected:
        raise ValueError(f"resume_state_dict: unexpected key(s) {_keys(unexpected)}")
    _check_position(state, settings)
    return False


def _keys(keys) -> str:
    shown = sorted(map(reprlib.repr, keys))
    return ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "")


def _get(state: dict, key: str):
    if key not in state:
        raise ValueError(f"resume_state_dict: key {key!r} is missing")
    return state[key]


def _check_setting(key: str, theirs, ours) -> None:
    if type(theirs) is not type(ours) or theirs != ours:
        hint = {"rank": " (each rank resumes from the state it saved)",
                "world_size": " (for another world size pass only pq_idx, rg_idx, epoch: the approximate resume)",
                }.get(key, "")
        raise ValueError(f"resume_state_dict was saved with {key}={reprlib.repr(theirs)}, this loader has "
                         f"{key}={reprlib.repr(ours)}{hint}")


def _require(ok: bool, where: str, expected: str, value) -> None:
    if not ok:
        raise ValueError(f"resume_state_dict: {where} must be {expected}, not {reprlib.repr(value)}")


def _int(value, where: str, low: int = 0) -> int:
    _require(type(value) is int and value >= low, where, f"an integer >= {low}", value)
    return value


def _items(value, where: str, lengths: tuple[int, ...] | None = None) -> list | tuple:
    """A list (a tuple too: a state not round-tripped through JSON), of one of the given lengths."""
    ok = isinstance(value, (list, tuple)) and (lengths is None or len(value) in lengths)
    _require(ok, where, "a list" + (f" of {' or '.join(map(str, lengths))} items" if lengths else ""), value)
    return value


def _name(value, where: str) -> str:
    ok = isinstance(value, str) and value not in ("", ".", "..") and not set(value) & {"/", "\\", "\0"}
    _require(ok, where, "a file name", value)
    return value


def _check_nanochat_position(state: dict) -> None:
    _int(state["pq_idx"], "pq_idx")
    _int(state["rg_idx"], "rg_idx")
    _int(state["epoch"], "epoch", low=1)


def _check_position(state: dict, settings: dict) -> None:
    rank, world_size = settings["rank"], settings["world_size"]
    _check_nanochat_position(state)
    cursor = _items(state["cursor"], "cursor", (4,))
    for i, low in enumerate((1, 0, 0, 0)):  # epoch, file index, row group, row
        _int(cursor[i], f"cursor[{i}]", low)
    _require(cursor[2] % world_size == rank, "cursor[2]", f"a row group of rank {rank} of {world_size}", cursor[2])
    _require(type(state["epoch_has_docs"]) is bool, "epoch_has_docs", "true or false", state["epoch_has_docs"])
    slots, names = _check_files(state["files"])
    if state["cursor_file"] is not None:
        _require(_name(state["cursor_file"], "cursor_file") in names, "cursor_file", "a name in files",
                 state["cursor_file"])
    _check_buffer(state["buffer"], slots, rank, world_size, settings["loader"])
    if settings["streaming"]:
        epoch_files = _items(state["epoch_files"], "epoch_files")
        for i, name in enumerate(epoch_files):
            _name(name, f"epoch_files[{i}]")
        _require(_int(state["pass_start"], "pass_start") <= len(epoch_files), "pass_start",
                 f"at most len(epoch_files) = {len(epoch_files)}", state["pass_start"])


def _check_files(files) -> tuple[set[int], set[str]]:
    slots, names = set(), set()
    for i, entry in enumerate(_items(files, "files")):
        where = f"files[{i}]"
        slot, name, size, footer, crc32c = _items(entry, where, (2 + len(FINGERPRINT),))
        _require(_int(slot, f"{where}[0]") not in slots, f"{where}[0]", "a slot not used before", slot)
        names.add(_name(name, f"{where}[1]"))
        _int(size, f"{where}[2]")
        _require(isinstance(footer, str), f"{where}[3]", "a footer digest (a string)", footer)
        _require(crc32c is None or isinstance(crc32c, str), f"{where}[4]", "a crc32c (a string) or null", crc32c)
        slots.add(slot)
    return slots, names


def _check_buffer(buffer, slots: set[int], rank: int, world_size: int, loader: str) -> None:
    for i, doc_id in enumerate(_items(buffer, "buffer")):
        where = f"buffer[{i}]"
        _items(doc_id, where, (3, 4))
        _require(_int(doc_id[0], f"{where}[0]") in slots, f"{where}[0]", "a slot listed in files", doc_id[0])
        _require(_int(doc_id[1], f"{where}[1]") % world_size == rank, f"{where}[1]",
                 f"a row group of rank {rank} of {world_size}", doc_id[1])
        _int(doc_id[2], f"{where}[2]")
        if len(doc_id) == 4:  # concatenation: only the first doc can be partly used
            _require(loader == "bestfit" or i == 0, where, "[slot, row group, row]", doc_id)
            _int(doc_id[3], f"{where}[3]", low=1)
