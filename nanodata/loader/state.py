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

Version 2 is the state of a default run (one data_dir, logical_streams unset): one rank's single stream. Version 3
is that of a run with logical streams or a mixture (see streams.py): the settings plus `logical_streams` and
`weights`, the rank's `next_stream`, and per logical stream {stream, taken, sources, buffer}: the tokens each
source has put in the buffer, each source's position as above plus `pending` (docs read, not yet buffered), and
the buffer's docs tagged with their source: [source, slot, row group, row(, offset)].

`plan_resume` turns resume_state_dict into the streams this rank continues. One state, or the list of all
ranks' states, at the world size it was saved at: this rank's own, exactly. The list at another world size (an
elastic resume): every logical stream's saved part, whole, to the rank that now serves it. A default run has
as many logical streams as its first world size, so it resumes elastically on fewer ranks, never more.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, field

import tiktoken

from nanodata.errors import NanodataError
from nanodata.tokenizer import Tokenizer

STATE_VERSION = 2  # a default run's state
STREAMS_VERSION = 3  # a run with logical streams or a mixture
NANOCHAT_KEYS = ("pq_idx", "rg_idx", "epoch")
SOURCE_KEYS = (*NANOCHAT_KEYS, "cursor", "cursor_file", "epoch_has_docs", "files")
POSITION_KEYS = (*SOURCE_KEYS, "buffer")
STREAMING_KEYS = ("epoch_files", "pass_start")
RUN_KEYS = ("logical_streams", "weights", "next_stream", "streams")
STREAM_KEYS = ("stream", "taken", "sources", "buffer")
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


@dataclass
class Resume:
    """Where a loader starts. `streams` maps each logical stream this rank serves to its saved part in version 3's
    form (empty: a fresh start); `layout` is the version of the states the loader yields; `reweighted`: the
    weights changed (a curriculum), so the interleave counts restart."""
    logical_streams: int
    layout: int
    streams: dict[int, dict] = field(default_factory=dict)
    next_stream: int = 0
    nanochat: dict | None = None
    reweighted: bool = False


def plan_resume(resume, settings: dict, logical_streams: int | None = None, weights: list[float] | None = None,
                reweight: bool = False) -> Resume:
    """Check resume_state_dict (None, nanochat's state, one nanodata state, or the list of all ranks' states in
    rank order) against the loader's settings and say which saved streams this rank continues. The files the
    states name are checked later, by the sources, which can read them."""
    rank, world_size = settings["rank"], settings["world_size"]
    opted_in = logical_streams is not None or weights is not None
    if resume is None:
        n = world_size if logical_streams is None else logical_streams
        _check_fits(world_size, n, "this run's")
        return Resume(n, STREAMS_VERSION if opted_in else STATE_VERSION)
    if isinstance(resume, dict) and "version" not in resume:
        check_state(resume, settings)
        if opted_in:
            raise NanodataError("resume_state_dict is nanochat's {pq_idx, rg_idx, epoch}, which resumes only a loader "
                                "of one data_dir without logical_streams")
        return Resume(world_size, STATE_VERSION, nanochat=resume)
    if isinstance(resume, dict) and not (resume.get("world_size") == 1 and world_size != 1):
        return _exact(resume, settings, logical_streams, weights, reweight)
    states = _state_list(resume)
    if len(states) == world_size:
        return _exact(states[rank], settings, logical_streams, weights, reweight)
    return _elastic(states, settings, logical_streams, weights, reweight)


def _state_list(resume) -> list[dict]:
    """The list of all ranks' states, each a nanodata state of the rank it is listed as."""
    if isinstance(resume, dict):
        resume = [resume]
    if not isinstance(resume, (list, tuple)) or not resume:
        raise NanodataError(f"resume_state_dict must be a dict, a state yielded by a nanodata loader or nanochat's "
                            f"{{pq_idx, rg_idx, epoch}}, or the list of all ranks' states, not "
                            f"{reprlib.repr(resume) if isinstance(resume, (list, tuple)) else type(resume).__name__}")
    for i, state in enumerate(resume):
        where = f"resume_state_dict[{i}]"
        if not isinstance(state, dict) or "version" not in state:
            raise NanodataError(f"{where} must be a state yielded by a nanodata loader (a list holds the states of all "
                                f"ranks; nanochat's state is passed alone), not {reprlib.repr(state)}")
        if (state.get("rank"), state.get("world_size")) != (i, len(resume)):
            raise NanodataError(f"{where} was saved by rank {reprlib.repr(state.get('rank'))} of "
                                f"{reprlib.repr(state.get('world_size'))}; a list must hold the states of ranks 0.."
                                f"{len(resume) - 1} of {len(resume)}, in rank order")
    return list(resume)


def _exact(state: dict, settings: dict, logical_streams, weights, reweight) -> Resume:
    """This rank's own state, continued exactly."""
    rank = settings["rank"]
    if _version(state) == STATE_VERSION:
        _check_default_run(settings["world_size"], logical_streams, weights)
        check_state(state, settings)
        layout = STATE_VERSION if logical_streams is None else STREAMS_VERSION
        return Resume(settings["world_size"], layout, {rank: _as_stream(state, settings["streaming"])})
    n, reweighted = _check_streams_state(state, settings, logical_streams, weights, reweight)
    return Resume(n, STREAMS_VERSION, {saved["stream"]: saved for saved in state["streams"]}, state["next_stream"],
                  reweighted=reweighted)


def _elastic(states: list[dict], settings: dict, logical_streams, weights, reweight) -> Resume:
    """All ranks' states at another world size: each logical stream's part goes whole to the rank serving it."""
    saved_world, world_size = len(states), settings["world_size"]
    if settings["loader"] != "bestfit":
        raise NanodataError(f"resume_state_dict holds the states of {saved_world} ranks; the concatenation loader "
                            f"resumes only at the world size it was saved at, not at world_size={world_size}")
    versions = {_version(state) for state in states}
    if len(versions) > 1:
        raise NanodataError(f"resume_state_dict mixes state versions {sorted(versions)}: pass the states of one run")
    parts, reweighted = {}, False
    for i, state in enumerate(states):
        theirs = {**settings, "rank": i, "world_size": saved_world}
        if STATE_VERSION in versions:
            _check_default_run(saved_world, logical_streams, weights)
            check_state(state, theirs)
            n, parts[i] = saved_world, _as_stream(state, settings["streaming"])
        else:
            n, reweighted = _check_streams_state(state, theirs, logical_streams, weights, reweight)
            logical_streams = n  # every state must agree with the first
            parts.update((saved["stream"], saved) for saved in state["streams"])
    _check_fits(world_size, n, "the saved run's")
    return Resume(n, STREAMS_VERSION, {s: parts[s] for s in range(settings["rank"], n, world_size)},
                  reweighted=reweighted)


def _check_fits(world_size: int, n: int, whose: str) -> None:
    if world_size > n:
        raise NanodataError(f"world_size={world_size} is more than {whose} logical_streams={n}: each rank serves at "
                            f"least one logical stream (start a run with logical_streams >= {world_size} to run it on "
                            f"{world_size} ranks; a run without it has as many as its first world size)")


def _check_default_run(saved_world: int, logical_streams, weights) -> None:
    """A version 2 state is a run of one data_dir whose logical streams are its ranks."""
    if weights is not None:
        raise NanodataError(f"resume_state_dict was saved by a loader of one data_dir, this loader has "
                            f"{len(weights)} sources")
    if logical_streams is not None and logical_streams != saved_world:
        raise NanodataError(f"resume_state_dict was saved by a run of world size {saved_world} without "
                            f"logical_streams, which has {saved_world}; this loader has "
                            f"logical_streams={logical_streams} (the number is fixed for the life of a run)")


def _as_stream(state: dict, streaming: bool) -> dict:
    """A version 2 state as version 3's part of one logical stream (its rank) with one source."""
    keys = SOURCE_KEYS + (STREAMING_KEYS if streaming else ())
    return {"stream": state["rank"], "taken": [0], "sources": [{**{key: state[key] for key in keys}, "pending": []}],
            "buffer": [[0, *doc_id] for doc_id in state["buffer"]]}


def _version(state: dict) -> int:
    version = state["version"]
    if type(version) is not int or version not in (STATE_VERSION, STREAMS_VERSION):
        raise NanodataError(f"resume_state_dict has version {reprlib.repr(version)}; this loader reads versions "
                            f"{STATE_VERSION} and {STREAMS_VERSION} (pass only its pq_idx, rg_idx, epoch for nanochat's "
                            f"approximate resume)")
    return version


def check_state(state, settings: dict) -> bool:
    """Check a nanochat or version 2 state against the loader's settings: True for nanochat's state
    (approximate resume), False for a nanodata state that can be continued exactly, if its files are unchanged."""
    if not isinstance(state, dict):
        raise NanodataError(f"resume_state_dict must be a dict, a state yielded by a nanodata loader or nanochat's "
                            f"{{pq_idx, rg_idx, epoch}}, not {type(state).__name__}")
    if "version" not in state:
        if set(state) != set(NANOCHAT_KEYS):
            raise NanodataError(f"resume_state_dict has no 'version', so it is not a nanodata state, and it is not "
                                f"nanochat's, which has exactly the keys pq_idx, rg_idx, epoch (it has {_keys(state)})")
        _check_nanochat_position(state, "")
        return True
    for key, ours in settings.items():
        _check_setting(key, _get(state, key), ours)
    keys = ("version", *settings, *POSITION_KEYS, *(STREAMING_KEYS if settings["streaming"] else ()))
    _check_keys(state, keys, "")
    slots = _check_source(state, settings["rank"], settings["world_size"], settings["streaming"], "", "rank")
    _check_ids(state["buffer"], "buffer", [slots], settings["rank"], settings["world_size"], "rank",
               offsets="any" if settings["loader"] == "bestfit" else "first")
    return False


def _check_streams_state(state: dict, settings: dict, logical_streams, weights, reweight) -> tuple[int, bool]:
    """Check a version 3 state of rank `settings["rank"]`; returns its logical_streams and whether the weights
    changed (only allowed with reweight)."""
    if settings["loader"] != "bestfit":
        raise NanodataError(f"resume_state_dict has version {STREAMS_VERSION}, a best-fit loader's with logical streams "
                            f"or sources; this is the {settings['loader']} loader")
    for key, ours in settings.items():
        _check_setting(key, _get(state, key), ours)
    rank, world_size = settings["rank"], settings["world_size"]
    n = _int(_get(state, "logical_streams"), "logical_streams", low=1)
    if logical_streams is not None:
        _check_setting("logical_streams", n, logical_streams)
    _require(n >= world_size, "logical_streams", f"at least the world size {world_size}", n)
    reweighted = _check_weights(_get(state, "weights"), weights, reweight)
    _check_keys(state, ("version", *settings, *RUN_KEYS), "")
    owned = list(range(rank, n, world_size))
    streams = _items(state["streams"], "streams", (len(owned),))
    _require(type(state["next_stream"]) is int and 0 <= state["next_stream"] < len(owned), "next_stream",
             f"an index into this rank's {len(owned)} streams", state["next_stream"])
    n_sources = 1 if weights is None else len(weights)
    for j, (stream, saved) in enumerate(zip(owned, streams, strict=False)):
        _check_stream(saved, stream, n, n_sources, settings["streaming"], f"streams[{j}]")
    return n, reweighted


def _check_weights(theirs, ours: list[float] | None, reweight: bool) -> bool:
    if theirs is not None:
        for i, weight in enumerate(_items(theirs, "weights")):
            _require(_is_weight(weight), f"weights[{i}]", "a number > 0", weight)

    def described(weights):
        return "one data_dir" if weights is None else f"{len(weights)} sources"

    if (theirs is None) != (ours is None) or len(theirs or ()) != len(ours or ()):
        raise NanodataError(f"resume_state_dict was saved by a loader of {described(theirs)}, this loader has "
                            f"{described(ours)}")
    changed = theirs is not None and [float(w) for w in theirs] != ours
    if changed and not reweight:
        raise NanodataError(f"resume_state_dict was saved with weights={reprlib.repr(list(theirs))}, this loader has "
                            f"weights={reprlib.repr(ours)} (pass reweight=True to change them at resume: a curriculum)")
    return changed


def _is_weight(value) -> bool:
    return type(value) in (int, float) and 0 < value < float("inf")


def _check_stream(saved, stream: int, n: int, n_sources: int, streaming: bool, where: str) -> None:
    _require(isinstance(saved, dict), where, "a dict", saved)
    _check_keys(saved, STREAM_KEYS, f"{where}.")
    _require(type(saved["stream"]) is int and saved["stream"] == stream, f"{where}.stream",
             f"{stream} (rank r of W serves logical streams r, r+W, ...)", saved["stream"])
    for i, taken in enumerate(_items(saved["taken"], f"{where}.taken", (n_sources,))):
        _int(taken, f"{where}.taken[{i}]")
    slots = []
    for i, source in enumerate(_items(saved["sources"], f"{where}.sources", (n_sources,))):
        here = f"{where}.sources[{i}]"
        _require(isinstance(source, dict), here, "a dict", source)
        _check_keys(source, (*SOURCE_KEYS, *(STREAMING_KEYS if streaming else ()), "pending"), f"{here}.")
        slots.append(_check_source(source, stream, n, streaming, f"{here}.", "stream"))
        _check_ids(source["pending"], f"{here}.pending", [slots[-1]], stream, n, "stream", offsets="none")
    _check_ids(saved["buffer"], f"{where}.buffer", slots, stream, n, "stream", offsets="any", tagged=True)


def _keys(keys) -> str:
    shown = sorted(map(reprlib.repr, keys))
    return ", ".join(shown[:8]) + (", ..." if len(shown) > 8 else "")


def _get(state: dict, key: str, where: str = ""):
    """state[key]; `where` locates a nested state ("streams[0]." and the like) in the message."""
    if key not in state:
        raise NanodataError(f"resume_state_dict: key {where + key if where else repr(key)} is missing")
    return state[key]


def _check_keys(state: dict, keys, where: str) -> None:
    for key in keys:
        _get(state, key, where)
    unexpected = set(state) - set(keys)
    if unexpected:
        raise NanodataError(f"resume_state_dict: unexpected key(s) {_keys(unexpected)}" + (f" in {where[:-1]}" if where else ""))


def _check_setting(key: str, theirs, ours) -> None:
    if type(theirs) is not type(ours) or theirs != ours:
        hint = {"rank": " (each rank resumes from the state it saved, or from the list of all ranks' states)",
                "world_size": " (to resume at another world size pass the list of all ranks' states, gathered by "
                              "nanodata.loader.gather_states)",
                "logical_streams": " (the number is fixed for the life of a run)",
                }.get(key, "")
        raise NanodataError(f"resume_state_dict was saved with {key}={reprlib.repr(theirs)}, this loader has "
                            f"{key}={reprlib.repr(ours)}{hint}")


def _require(ok: bool, where: str, expected: str, value) -> None:
    if not ok:
        raise NanodataError(f"resume_state_dict: {where} must be {expected}, not {reprlib.repr(value)}")


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


def _check_nanochat_position(state: dict, where: str) -> None:
    _int(state["pq_idx"], f"{where}pq_idx")
    _int(state["rg_idx"], f"{where}rg_idx")
    _int(state["epoch"], f"{where}epoch", low=1)


def _check_source(state: dict, stream: int, n: int, streaming: bool, where: str, owner: str) -> set[int]:
    """One source's position: the row groups of `owner` (a rank, or a logical stream) `stream` of n. Returns the
    slots of its files."""
    _check_nanochat_position(state, where)
    cursor = _items(state["cursor"], f"{where}cursor", (4,))
    for i, low in enumerate((1, 0, 0, 0)):  # epoch, file index, row group, row
        _int(cursor[i], f"{where}cursor[{i}]", low)
    _require(cursor[2] % n == stream, f"{where}cursor[2]", f"a row group of {owner} {stream} of {n}", cursor[2])
    _require(type(state["epoch_has_docs"]) is bool, f"{where}epoch_has_docs", "true or false",
             state["epoch_has_docs"])
    slots, names = _check_files(state["files"], f"{where}files")
    if state["cursor_file"] is not None:
        _require(_name(state["cursor_file"], f"{where}cursor_file") in names, f"{where}cursor_file",
                 "a name in files", state["cursor_file"])
    if streaming:
        epoch_files = _items(state["epoch_files"], f"{where}epoch_files")
        for i, name in enumerate(epoch_files):
            _name(name, f"{where}epoch_files[{i}]")
        _require(_int(state["pass_start"], f"{where}pass_start") <= len(epoch_files), f"{where}pass_start",
                 f"at most len(epoch_files) = {len(epoch_files)}", state["pass_start"])
    return slots


def _check_files(files, where: str) -> tuple[set[int], set[str]]:
    slots, names = set(), set()
    for i, entry in enumerate(_items(files, where)):
        here = f"{where}[{i}]"
        slot, name, size, footer, crc32c = _items(entry, here, (2 + len(FINGERPRINT),))
        _require(_int(slot, f"{here}[0]") not in slots, f"{here}[0]", "a slot not used before", slot)
        names.add(_name(name, f"{here}[1]"))
        _int(size, f"{here}[2]")
        _require(isinstance(footer, str), f"{here}[3]", "a footer digest (a string)", footer)
        _require(crc32c is None or isinstance(crc32c, str), f"{here}[4]", "a crc32c (a string) or null", crc32c)
        slots.add(slot)
    return slots, names


def _check_ids(ids, where: str, slots: list[set[int]], stream: int, n: int, owner: str, offsets: str,
               tagged: bool = False) -> None:
    """Document ids [slot, row group, row], led by the source index when tagged; an offset after them is allowed
    on any id (best-fit's requeued tails), on the first only (concatenation) or on none."""
    lead = int(tagged)  # index of the slot
    width = 3 + lead
    allowed = (width,) if offsets == "none" else (width, width + 1)
    for i, doc_id in enumerate(_items(ids, where)):
        here = f"{where}[{i}]"
        _items(doc_id, here, allowed)
        source = 0
        if tagged:
            source = doc_id[0]
            _require(type(source) is int and 0 <= source < len(slots), f"{here}[0]",
                     f"a source index below {len(slots)}", source)
        slot, rg_idx, row = doc_id[lead:width]
        _require(_int(slot, f"{here}[{lead}]") in slots[source], f"{here}[{lead}]", "a slot listed in files", slot)
        _require(_int(rg_idx, f"{here}[{lead + 1}]") % n == stream, f"{here}[{lead + 1}]",
                 f"a row group of {owner} {stream} of {n}", rg_idx)
        _int(row, f"{here}[{lead + 2}]")
        if len(doc_id) > width:  # concatenation: only the first doc can be partly used
            _require(offsets == "any" or i == 0, here, "[slot, row group, row]", doc_id)
            _int(doc_id[width], f"{here}[{width}]", low=1)
