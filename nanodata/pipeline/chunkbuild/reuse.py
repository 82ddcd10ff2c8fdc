"""Reuse of each file's chunking work across runs: the key of a file's result, its entry, and what a run reused.

A file's result (its docs and fidelity figures, near-dedup signature, filter and redaction outcome; in the global
modes its parsed units too) is a pure function of its content and of the settings that decide the output. So it is
stored under key = digest(CHUNK_FORMAT, the settings' digest, the stored shapes, the pass, the file's content
digest) in an EntryStore (nanodata.storage.entries: written whole, each entry under a keyed MAC over its key and
payload), as plain data (nanodata.pipeline.chunkbuild.stored), and a later run reads it instead of chunking the file
again. An entry whose MAC does not hold (edited, moved to another key, made with another secret) or whose payload
does not decode to its shape is a miss: the file is chunked again and the entry counted as rebuilt. Nothing
position-dependent is stored: a file's gid, source name and project are the run's, so a record
inserted above it in a JSONL, or a file added beside it, leaves its entry valid.

In the global modes a file's docs also depend on what it resolves names from: its project and, transitively, the
projects whose headers the files it reaches include (nanodata.pipeline.chunkbuild.globalindex.view digests). Those
docs are keyed by that view's digest and the file's place in its project, so a project is re-emitted exactly
when one of the files it can see changed; parsing is keyed by content alone, so only changed files are parsed.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, deque
from dataclasses import dataclass, field

from nanodata.pipeline.chunkbuild.stored import RESULT, SCHEMA
from nanodata.storage import is_gcs
from nanodata.storage.auth import Secret, load_secret
from nanodata.storage.entries import WINDOW, EntryStore
from nanodata.storage.files import content_hash, data_digest, object_digest
from nanodata.storage.plain import Codec, Undecodable

log = logging.getLogger(__name__)

# the chunker's output version: bump whenever what it makes of a file changes (docs, fidelity figures, signatures,
# units, filters). It is in every cache key and in every build key (nanodata.jobs.inputs.build_key), so one bump
# misses every entry and rebuilds every corpus.
CHUNK_FORMAT = 6
COUNTS = ("files_reused", "files_chunked", "bytes_reused", "bytes_chunked", "entries_rebuilt")


def settings_digest(settings: dict) -> str:
    """The digest of everything besides a file's content that decides its result: the settings of scope FILE
    (nanodata.settings; ChunkConfig.file_cache gives the tokenizer by its identity and the benchmark files by their
    contents' digest) and CHUNK_FORMAT. Licenses are the corpus's, not a file's: a project's license drops all its
    files before any work, outside the cache."""
    return data_digest(json.dumps({"format": CHUNK_FORMAT, **settings}, sort_keys=True).encode())


def text_content_digest(text: str, file: str | None) -> str:
    """The content digest of a file's text as read (sources.load_text keeps undecodable bytes as surrogate escapes,
    so encoding gives the file's bytes back): what storage.content_digest gives for the file itself (sha256 of a
    local file, size:crc32c of a gs:// object), so a digest planned from a listing and one taken on reading agree.
    A JSONL record (file None): sha256 of its text."""
    if file is None:
        return data_digest(text.encode("utf-8", "surrogatepass"))
    data = text.encode("utf-8", "surrogateescape")
    return object_digest(len(data), data_digest(data, "crc32c")) if is_gcs(file) else data_digest(data)


@dataclass
class FileCache:
    """A worker's view of the run's entry store: values of `codec`'s type (a stored.Result), under keys that mix
    in `schema` (the shapes of what is stored, so a changed shape never meets an older entry). reuse=False: every
    file is chunked (a clean rebuild), its entry still written for the next run. secret: what authenticates the
    entries (None: the user's, nanodata.storage.auth.load_secret). window: entries fetched ahead from gs:// (`ahead`;
    0: none, each looked up on its file's turn)."""
    root: str
    salt: str
    reuse: bool = True
    secret: Secret | str | None = field(default=None, repr=False)
    codec: Codec = field(default=RESULT, repr=False)
    schema: str = SCHEMA
    window: int = WINDOW

    def __post_init__(self):
        self.secret = load_secret(self.secret)
        self.store = EntryStore(self.root, self.secret)

    def key(self, kind: str, *parts) -> bytes:
        return content_hash("\x00".join([self.salt, self.schema, kind, *map(str, parts)]).encode())

    def load(self, key: bytes, ahead: tuple | None = None):
        """(the stored value, rebuilt?): (None, True) for an entry that is corrupt, truncated, fails its MAC or does
        not decode to its shape (logged), (None, False) for none. ahead: (key, what EntryStore.get gave for it)
        when the entry was fetched ahead (`ahead`); the store is asked only when it is for another key or None."""
        if not self.reuse:
            return None, False
        payload, status = ahead[1] if ahead is not None and ahead[0] == key else self.store.get(key)
        if payload is None:
            return None, status != "miss"
        try:
            return self.codec.decode(payload), False
        except Undecodable as exc:
            log.warning("cache entry %s does not decode (%s): rebuilt", key.hex(), exc)
            return None, True

    def ahead(self, items, key_of):
        """(item, (key, its entry as EntryStore.get gives it) or None) of each item, in order: from gs://, the
        entries under key_of(item) (None: not known before the item is read, or never looked up) fetched `window`
        ahead (EntryStore.get_many), while the files before them are chunked. Items are taken from their iterable
        only in this thread. A local store's entries are left to the workers: reading one is no round trip."""
        if not (self.reuse and self.window and is_gcs(self.root)):
            yield from ((item, None) for item in items)
            return
        taken: deque = deque()

        def keys():
            for item in items:
                taken.append((item, key_of(item)))
                yield taken[-1][1]

        for entry in self.store.get_many(keys(), self.window):
            item, key = taken.popleft()
            yield item, None if key is None else (key, entry)

    def save(self, key: bytes, value) -> None:
        self.store.put(key, self.codec.encode(value))


@dataclass
class ReuseTally:
    """Per project: files (and bytes) reused and chunked, and entries found corrupt and rebuilt; the keys used."""
    by_project: dict = field(default_factory=dict)
    used: bytearray = field(default_factory=bytearray)

    def add(self, project: str, size: int, key: bytes | None, reused: bool, rebuilt: bool) -> None:
        if key is None:
            return
        counts = self.by_project.setdefault(project, Counter())
        counts["files_reused" if reused else "files_chunked"] += 1
        counts["bytes_reused" if reused else "bytes_chunked"] += size
        counts["entries_rebuilt"] += rebuilt
        self.used += key

    def after_parse(self, parse: ReuseTally) -> ReuseTally:
        """The global modes' tally: this emit pass's counts (it makes the docs) with_parse the parse pass's; the
        keys of both."""
        self.used += parse.used
        self.by_project = {p: Counter(c) for p, c in with_parse(self.to_dict(), parse.to_dict()).items()}
        return self

    def to_dict(self) -> dict:
        return {project: {k: counts[k] for k in (*COUNTS, *sorted(set(counts) - set(COUNTS)))}
                for project, counts in sorted(self.by_project.items())}


def totals(by_project: dict) -> dict:
    """The counts summed over projects (each of COUNTS 0 when nothing was cached)."""
    out = dict.fromkeys(COUNTS, 0)
    for counts in by_project.values():
        for k, n in counts.items():
            out[k] = out.get(k, 0) + n
    return out


def with_parse(emitted: dict, parsed: dict) -> dict:
    """Per-project counts of a global mode: the emit pass's, plus the parse pass's corrupt entries and its
    `files_parsed` (the files parsed again: changed or new)."""
    out = {project: dict(counts) for project, counts in emitted.items()}
    for project, counts in parsed.items():
        mine = out.setdefault(project, dict.fromkeys(COUNTS, 0))
        mine["entries_rebuilt"] += counts["entries_rebuilt"]
        mine["files_parsed"] = mine.get("files_parsed", 0) + counts["files_chunked"]
    return dict(sorted(out.items()))


def merge(parts) -> dict:
    """Per-project counts of several partitions (ReuseTally.to_dict each) summed."""
    out: dict = {}
    for part in parts:
        for project, counts in part.items():
            mine = out.setdefault(project, dict.fromkeys(COUNTS, 0))
            for k, n in counts.items():
                mine[k] = mine.get(k, 0) + n
    return dict(sorted(out.items()))
