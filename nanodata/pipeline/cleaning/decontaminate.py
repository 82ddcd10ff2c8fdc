"""Benchmark decontamination: drop a file that contains a benchmark item's text (StarCoder2's rule).

A file is *contaminated* when it contains the text of a benchmark item (a HumanEval-X prompt, a canonical
solution, a MultiPL-E prompt, ...) as an exact substring once whitespace is ignored: all ASCII whitespace
(space, tab, newline, carriage return, vertical tab, form feed) is deleted from both the item and the file
before the comparison, as StarCoder2 did, so a solution that was re-indented, re-wrapped or had its line
endings changed still matches. (datatrove compares word n-grams instead; deleting whitespace is stricter about
everything else, and needs no tokenizer.) Items whose text, whitespace deleted, is shorter than
`MIN_ITEM_BYTES` (32 bytes of UTF-8, i.e. 32 characters of ASCII code) are ignored: a short prompt or a
one-line solution such as `return a*h*0.5;}` occurs in countless unrelated files.

Matching is one pass of an Aho-Corasick automaton (ahocorasick_rs, Rust) over the file's whitespace-free UTF-8
bytes. It does not hold the whole items: each item is represented by one `KEY_BYTES`-long window of its text
(of 16 evenly spaced windows, the one with the most distinct bytes, so that shared boilerplate such as
`#include<bits/stdc++.h>` is not chosen), and a hit on a window is then checked against the whole item with
`bytes.startswith`. The result is the same as searching for every whole item (every occurrence of an item
contains its window at a known offset), but the automaton is ~20x smaller and the scan faster. Measured on the
libstdc++ headers (783 files, 11.7 MB) with 3,000 items of ~660 bytes (windows of real C++ code, which hit more
often than benchmark prompts): normalizing 675 MB/s; pyahocorasick 2.3.1 over whole items 59 MB/s;
ahocorasick_rs 1.0.3 over whole items 96 MB/s (str) or 126 MB/s (bytes); this filter ~170-200 MB/s (10,000 items:
~110 MB/s), i.e. 1.3-1.8% (10,000: 2.8%) of the chunk step at 2.5-3 MB/s per core. The automaton is built once per
process, on the first file, in ~0.1-0.2 s; it is not pickled: workers get the item files' names and a digest
of their content, read the items again and check the digest.

Item files are JSON Lines, local or gs://, plain, .gz or .zst, one item per line: `{"text": ...}` plus,
optionally, an id field (the first of `ID_FIELDS` present, e.g. "task_id"), else the item is named
"FILE:LINE". A missing file, a line that is not a JSON object or has no "text" string is a NanodataError
naming FILE:LINE, raised when the Decontaminator is made, before any work. No benchmark data ships with
nanodata; build the file once, for instance from HumanEval-X and MultiPL-E C++ (prompts and canonical solutions
as separate items, since either may be pasted alone), with `datasets` (which installs huggingface_hub):

    import json
    from datasets import load_dataset
    from huggingface_hub import hf_hub_download

    with open("cpp_benchmarks.jsonl", "w") as out:
        def item(task_id, text):
            out.write(json.dumps({"task_id": task_id, "text": text}) + "\\n")

        # HumanEval-X ships a loading script, which datasets>=4 no longer runs: read its JSON Lines directly.
        # (With datasets<4: load_dataset("THUDM/humaneval-x", "cpp", split="test", trust_remote_code=True).)
        path = hf_hub_download("THUDM/humaneval-x", "data/cpp/data/humaneval.jsonl", repo_type="dataset")
        for row in map(json.loads, open(path)):
            item(row["task_id"] + "/prompt", row["prompt"])                  # "CPP/0/prompt"
            item(row["task_id"] + "/solution", row["canonical_solution"])
        for row in load_dataset("nuprl/MultiPL-E", "humaneval-cpp", split="test"):
            item("MultiPL-E/" + row["name"], row["prompt"])                  # "MultiPL-E/HumanEval_0_..."

and pass it as `Decontaminator(("cpp_benchmarks.jsonl",))`. `load_items` reads the same files for a run's
summary (how many items, how many long enough to match); counting drops by item is the caller's job
(`Drop.item` is the matched item's id).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.pipeline.cleaning.stages import Drop, FileFilter

MIN_ITEM_BYTES = 32  # items shorter than this, whitespace deleted (UTF-8 bytes), are ignored: they match anywhere
KEY_BYTES = 32       # the window of each item the automaton holds (<= MIN_ITEM_BYTES); a hit is checked in full
KEY_CANDIDATES = 16  # evenly spaced windows an item's key is chosen from (the one with the most distinct bytes)
DFA_MAX_KEYS = 4000  # up to this many keys the automaton is a DFA (3,000: 45 MB, 0.12 s to build, scans ~35% faster
#                      than the contiguous NFA); above, the NFA (10,000 keys: 5 MB and 0.06 s, where a DFA takes 280 MB)
WHITESPACE = b" \t\n\r\x0b\x0c"  # deleted before comparing (ASCII whitespace, as str.split() sees it in code)
ID_FIELDS = ("task_id", "name", "id")  # the first present names an item; else "FILE:LINE"


def normalize(text: str) -> bytes:
    """The text as compared: UTF-8 (lone surrogates kept, never an error) with all ASCII whitespace deleted.

    Encoding + bytes.translate: ~675 MB/s of C++ (str.translate ~320 MB/s, "".join(split()) ~225, re.sub ~60)."""
    return text.encode("utf-8", "surrogatepass").translate(None, WHITESPACE)


@dataclass(frozen=True)
class BenchmarkItem:
    id: str       # the value of its first ID_FIELDS field, else "FILE:LINE"
    where: str    # "FILE:LINE" it was read from
    text: str
    normalized: bytes = field(repr=False, compare=False)  # normalize(text)

    @property
    def matchable(self) -> bool:
        """Long enough to be searched for (MIN_ITEM_BYTES once whitespace is deleted)."""
        return len(self.normalized) >= MIN_ITEM_BYTES


def _item_id(row: dict, where: str) -> str:
    for name in ID_FIELDS:
        value = row.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) != "":
            return str(value)
    return where


def _read_items(uri: str) -> list[BenchmarkItem]:
    items: list[BenchmarkItem] = []
    number = 0
    try:
        with storage.open_decompressed(uri) as stream:
            for number, raw in enumerate(stream, start=1):
                where = f"{uri}:{number}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise NanodataError(f"{where}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise NanodataError(f"{where}: not a JSON line ({exc.msg}, column {exc.colno})") from None
                if not isinstance(row, dict):
                    raise NanodataError(f"{where}: not a JSON object but {type(row).__name__}; "
                                        'expected {"text": ...}') from None
                text = row.get("text")
                if not isinstance(text, str):
                    what = "no \"text\" key" if "text" not in row else f"\"text\" is {type(text).__name__}, not a string"
                    raise NanodataError(f"{where}: {what}; expected {{\"text\": ...}}")
                items.append(BenchmarkItem(_item_id(row, where), where, text, normalize(text)))
    except storage.decompression_errors() as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise NanodataError(f"{uri}:{number + 1}: cannot read ({detail})") from None
    if not items:
        raise NanodataError(f"{uri}: no benchmark items (expected JSON lines {{\"text\": ...}})")
    return items


def load_items(files) -> list[BenchmarkItem]:
    """Every item of the JSONL files, in order (short ones too: see BenchmarkItem.matchable), or a one-line
    NanodataError naming FILE:LINE for the first bad line (a missing file, not JSON, no "text" string)."""
    files = _file_tuple(files)
    return [item for uri in files for item in _read_items(uri)]


def _file_tuple(files) -> tuple[str, ...]:
    if isinstance(files, (str, os.PathLike)):
        files = (files,)
    files = tuple(os.fspath(f) for f in files)
    if not files:
        raise NanodataError("decontaminate: no benchmark item files given")
    return files


def _digest(items: list[BenchmarkItem]) -> str:
    h = hashlib.sha256()
    for item in items:
        for part in (item.id.encode(), item.normalized):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
    return h.hexdigest()


def _key_offset(data: bytes) -> int:
    """Where in `data` the automaton's window starts: of KEY_CANDIDATES evenly spaced windows, the one with the
    most distinct bytes (the first of equals), which avoids boilerplate and runs of one character."""
    span = len(data) - KEY_BYTES
    best, best_offset = -1, 0
    for k in range(KEY_CANDIDATES):
        offset = span * k // (KEY_CANDIDATES - 1)
        distinct = len(set(data[offset:offset + KEY_BYTES]))
        if distinct > best:
            best, best_offset = distinct, offset
    return best_offset


class _Index:
    """The automaton over each matchable item's key window, and for each key the items (with offsets) it stands for."""

    def __init__(self, items: list[BenchmarkItem]):
        import ahocorasick_rs

        by_key: dict[bytes, list[tuple[BenchmarkItem, int]]] = {}
        seen: set[bytes] = set()
        for item in items:
            if not item.matchable or item.normalized in seen:  # equal texts: the first item names the match
                continue
            seen.add(item.normalized)
            offset = _key_offset(item.normalized)
            by_key.setdefault(item.normalized[offset:offset + KEY_BYTES], []).append((item, offset))
        self.targets = list(by_key.values())
        kind = ahocorasick_rs.Implementation.DFA if len(by_key) <= DFA_MAX_KEYS else None  # None: the NFA
        self.automaton = ahocorasick_rs.BytesAhoCorasick(list(by_key), implementation=kind) if by_key else None

    def find(self, data: bytes) -> BenchmarkItem | None:
        """The item whose text `data` contains (the first found, scanning left to right), else None."""
        if self.automaton is None or len(data) < MIN_ITEM_BYTES:
            return None
        for key, start, _ in self.automaton.find_matches_as_indexes(data, overlapping=True):
            for item, offset in self.targets[key]:
                begin = start - offset
                if begin >= 0 and data.startswith(item.normalized, begin):
                    return item
        return None


class Decontaminator(FileFilter):
    """Drops a file that contains a benchmark item's text, whitespace ignored (see the module docstring).

    `files`: JSONL item files (local or gs://; .gz / .zst), read and checked here, before any work."""

    name = "decontaminated"

    def __init__(self, files: tuple[str, ...]):
        self.files = _file_tuple(files)
        items = load_items(self.files)
        self.digest = _digest(items)
        self.item_count = len(items)
        self.matchable_count = sum(item.matchable for item in items)
        self._items: list[BenchmarkItem] | None = items
        self._index: _Index | None = None

    def __getstate__(self) -> dict:
        # The automaton (and the items) stay behind: a worker reads the files again and builds its own.
        return {"files": self.files, "digest": self.digest, "item_count": self.item_count,
                "matchable_count": self.matchable_count}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._items = None
        self._index = None

    def __eq__(self, other) -> bool:
        return isinstance(other, Decontaminator) and (self.files, self.digest) == (other.files, other.digest)

    def __hash__(self) -> int:
        return hash((self.files, self.digest))

    def __repr__(self) -> str:
        return (f"Decontaminator(files={self.files!r}, items={self.item_count}, "
                f"matchable={self.matchable_count}, digest={self.digest[:12]})")

    def _build(self) -> _Index:
        items = self._items
        if items is None:
            items = load_items(self.files)
            if _digest(items) != self.digest:
                raise NanodataError(f"benchmark item files changed since the run started: {', '.join(self.files)}")
        self._index = _Index(items)
        self._items = None
        return self._index

    def keep(self, source: str, text: str) -> Drop | None:
        item = (self._index or self._build()).find(normalize(text))
        if item is None:
            return None
        return Drop(self.name, f"contains benchmark item {item.id} ({item.where}, "
                               f"{len(item.normalized):,} bytes, whitespace ignored)", item.id)
