"""This rank's documents, one tokenizer slice at a time, with a cursor that is an exact position.

Order (nanochat's): files sorted by name; rank r of W reads row groups r, r+W, r+2W, ... of each file; each
row group is cut into slices of `slice_size` texts. Every document has an id (file slot, row group, row), so a
resume state can name buffered documents instead of storing their tokens.

Streaming (a corpus still being written or synced): a pass is a sorted listing frozen when the pass starts;
after it, the directory is rescanned and only shards not yet read in this epoch form the next pass. With no new
shard the source waits, unless `_COMPLETE` is present, in which case the epoch ends. Because the rank striding
is per file, ranks that rescan at different moments still split every file's row groups the same way.

The files are read through nanodata.loader.remote: a local directory, or gs://bucket/prefix read in place
(ranged reads, read-ahead, an optional bounded local cache), with the same listing rules and the same texts. The
next row group of the open file is read and decoded in a thread while the current one is tokenized.
"""

from __future__ import annotations

import logging
import reprlib
import threading
from concurrent.futures import Future

from nanodata.corpus.layout import COMPLETE
from nanodata.dataset import corpus_location
from nanodata.errors import NanodataError
from nanodata.loader.lifecycle import start_thread
from nanodata.loader.remote import DEFAULT_CACHE_BYTES, LoaderClosed, open_shards
from nanodata.loader.state import FINGERPRINT

log = logging.getLogger("nanodata.loader")


class _Ahead:
    """Row group `key`'s texts, read and decoded by a daemon thread; texts() waits for them or re-raises its error."""

    def __init__(self, key: tuple[str, int], read, stop: threading.Event):
        self.key, self._future = key, Future()
        start_thread(stop, self._run, "nanodata-loader-decode", (read,))

    def _run(self, read) -> None:
        try:
            self._future.set_result(read())
        except BaseException as exc:  # re-raised where the texts are taken (LoaderClosed included)
            self._future.set_exception(exc)

    def texts(self) -> list[str]:
        return self._future.result()


class DocumentSource:
    def __init__(self, data_dir, split: str, rank: int, world_size: int, slice_size: int, *,
                 streaming: bool = False, poll_interval: float = 30.0, stop: threading.Event | None = None,
                 cache_dir=None, cache_bytes: int = DEFAULT_CACHE_BYTES):
        self.data_dir = corpus_location(data_dir)  # a Path, or a gs://bucket/prefix str
        self.split, self.rank, self.world_size, self.slice_size = split, rank, world_size, slice_size
        self.streaming, self.poll_interval = streaming, poll_interval
        self.stop = stop or threading.Event()
        # the files: a local directory, or a bucket prefix read in place (read-ahead, optional local cache)
        self.files = open_shards(self.data_dir, stop=self.stop, cache_dir=cache_dir, cache_bytes=cache_bytes)
        # cursor: the next slice to read is row `row` of row group `rg_idx` of pass_files[file_idx]
        self.epoch, self.file_idx, self.rg_idx, self.row = 1, 0, rank, 0
        self.done_files: list[str] = []  # streaming: files fully read in earlier passes of this epoch
        self.pass_files: list[str] = [] if streaming else self.files.split_names(split)
        self.epoch_has_docs = False
        self.last_read = (0, 0, 1)  # (pq_idx, rg_idx, epoch) of the latest slice: nanochat's state fields
        self._slots: dict[str, int] = {}  # file name <-> small int used in document ids
        self._names: dict[int, str] = {}
        self._open_file: tuple[str, object] | None = None
        self._open_group: tuple[str, int, list[str]] | None = None
        self._ahead: _Ahead | None = None  # the next row group of the open file, being read in a thread
        self._fingerprints: dict[str, list] = {}  # file name -> FINGERPRINT, taken once: states are saved often
        for name in self.pass_files:  # a static corpus: a file's slot is its index, in every run
            self.slot(name)

    # -- reading ------------------------------------------------------------------------------------------
    def next_slice(self) -> tuple[list[str], list[tuple[int, int, int]]]:
        """The next slice of texts and their ids (file slot, row group, row); loops over epochs forever."""
        while True:
            if self.file_idx >= len(self.pass_files):
                self._next_pass()
                continue
            name = self.pass_files[self.file_idx]
            pf = self._parquet(name)
            if self.rg_idx >= pf.num_row_groups:
                self.file_idx, self.rg_idx, self.row = self.file_idx + 1, self.rank, 0
                continue
            texts = self._row_group(name, pf, self.rg_idx)
            if self.row >= len(texts):
                self.rg_idx, self.row = self.rg_idx + self.world_size, 0
                continue
            start, self.row = self.row, self.row + self.slice_size
            chunk = texts[start:self.row]
            self.epoch_has_docs = True
            self.last_read = (self.file_idx, self.rg_idx, self.epoch)
            slot = self.slot(name)
            return chunk, [(slot, self.rg_idx, start + i) for i in range(len(chunk))]

    def read_docs(self, ids) -> list[str]:
        """Texts of the documents a resume state names by ids (slot, row group, row, ...), in the given order."""
        files: dict[int, object] = {}
        groups: dict[tuple[int, int], list[str]] = {}
        texts = []
        for doc_id in ids:
            slot, rg_idx, row = doc_id[0], doc_id[1], doc_id[2]
            name = self._names[slot]
            path = self.files.label(name)
            if slot not in files:
                files[slot] = self.files.parquet(name)
            if rg_idx >= files[slot].num_row_groups:
                raise NanodataError(f"resume_state_dict names row group {rg_idx} of {path}, which has "
                                    f"{files[slot].num_row_groups}")
            if (slot, rg_idx) not in groups:
                groups[slot, rg_idx] = self.files.texts(name, files[slot], rg_idx)
            rows = groups[slot, rg_idx]
            if row >= len(rows):
                raise NanodataError(f"resume_state_dict names row {row} of {path} row group {rg_idx}, which has "
                                    f"{len(rows)} rows")
            texts.append(rows[row])
        return texts

    def slot(self, name: str) -> int:
        if name not in self._slots:
            slot = max(self._names, default=-1) + 1
            self._slots[name], self._names[slot] = slot, name
        return self._slots[name]

    def name_of(self, slot: int) -> str:
        return self._names[slot]

    def _parquet(self, name: str):
        if self._open_file is None or self._open_file[0] != name:
            self._open_file = (name, self.files.parquet(name))
        return self._open_file[1]

    def _row_group(self, name: str, pf, rg_idx: int) -> list[str]:
        if self._open_group is None or self._open_group[:2] != (name, rg_idx):
            ahead, self._ahead = self._ahead, None
            if ahead is not None and ahead.key == (name, rg_idx):
                texts = ahead.texts()
            else:
                texts = self.files.texts(name, pf, rg_idx, self._upcoming(), self.world_size)
            self._open_group = (name, rg_idx, texts)
            following = rg_idx + self.world_size
            if following < pf.num_row_groups:  # decoded while this one is tokenized, so it never stalls the tokenizer
                upcoming = [(name, following + self.world_size), *list(self._upcoming())[1:]]
                self._ahead = _Ahead((name, following),
                                     lambda: self.files.texts(name, pf, following, upcoming, self.world_size),
                                     self.stop)
        return self._open_group[2]

    def _upcoming(self):
        """What this reader reads after the current row group, as (file, first row group) with the stride
        world_size: the read-ahead order. A static corpus goes on with the next epoch's identical pass; a
        stream's next pass is not known yet."""
        yield self.pass_files[self.file_idx], self.rg_idx + self.world_size
        for name in self.pass_files[self.file_idx + 1:] + ([] if self.streaming else self.pass_files):
            yield name, self.rank

    # -- passes and epochs --------------------------------------------------------------------------------
    def _next_pass(self) -> None:
        if not self.streaming:
            self._next_epoch(self.pass_files)
            return
        waiting = False
        while True:
            complete = self.files.complete()  # checked before listing: _COMPLETE is written last
            listing = self._streaming_listing()
            seen = set(self.done_files) | set(self.pass_files)
            new = [name for name in listing if name not in seen]
            if new:
                self.done_files += self.pass_files
                self.pass_files, self.file_idx, self.rg_idx, self.row = new, 0, self.rank, 0
                return
            if complete:
                self._next_epoch(listing)
                return
            if not waiting:
                log.warning("nanodata loader: waiting for new %s shards in %s (no %s yet; polling every %gs)",
                            self.split, self.data_dir, COMPLETE, self.poll_interval)
                waiting = True
            if self.stop.wait(self.poll_interval):
                raise LoaderClosed()

    def _next_epoch(self, files: list[str]) -> None:
        if not self.epoch_has_docs:
            raise NanodataError(f"{self.data_dir}: rank {self.rank} of {self.world_size} (a logical stream when "
                                f"logical_streams is set) got no documents in a whole pass over the {self.split} files "
                                f"(too few row groups or empty files)")
        self.epoch += 1
        self.epoch_has_docs = False
        self.done_files, self.pass_files = [], list(files)
        self.file_idx, self.rg_idx, self.row = 0, self.rank, 0

    def _streaming_listing(self) -> list[str]:
        """This split's finished files, sorted. Val is explicit (manifest or val*.parquet), never the newest file."""
        return self.files.streaming_names(self.split)

    # -- state --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        pq_idx, rg_idx, epoch = self.last_read
        state = {"pq_idx": pq_idx, "rg_idx": rg_idx, "epoch": epoch,
                 "cursor": [self.epoch, self.file_idx, self.rg_idx, self.row],
                 "cursor_file": self.pass_files[self.file_idx] if self.file_idx < len(self.pass_files) else None,
                 "epoch_has_docs": self.epoch_has_docs}
        if self.streaming:
            state["epoch_files"], state["pass_start"] = self.done_files + self.pass_files, len(self.done_files)
        return state

    def load_state_dict(self, state: dict) -> dict[int, int]:
        """Restore the exact cursor of a state that nanodata.loader.state has checked, once the files it names
        are this split's and unchanged. Returns {slot in the state: slot here} for the state's document ids."""
        self.epoch, self.file_idx, self.rg_idx, self.row = state["cursor"]
        self.epoch_has_docs = state["epoch_has_docs"]
        self.last_read = (state["pq_idx"], state["rg_idx"], state["epoch"])
        if self.streaming:
            epoch_files, start = list(state["epoch_files"]), state["pass_start"]
            self._check_split_files(epoch_files, self._streaming_listing(), "epoch_files")
            self.done_files, self.pass_files = epoch_files[:start], epoch_files[start:]
            for name in epoch_files:  # the order in which the interrupted run opened them, within this epoch
                self.slot(name)
        names = [name for _, name, *_ in state["files"]]
        self._check_split_files(names, self.done_files + self.pass_files, "files")
        for _, name, *recorded in state["files"]:
            self._check_unchanged(name, recorded)
        name = state["cursor_file"]
        if name is not None and (self.file_idx >= len(self.pass_files) or self.pass_files[self.file_idx] != name):
            if name not in self.pass_files:
                raise NanodataError(f"resume_state_dict reads {name} next, which is not in the rest of its pass "
                                    f"{reprlib.repr(self.pass_files)}")
            self.file_idx = self.pass_files.index(name)
        return {slot: self.slot(name) for slot, name, *_ in state["files"]}

    def _check_split_files(self, names: list[str], split_files: list[str], key: str) -> None:
        known = set(split_files)
        for name in names:
            if name not in known:
                raise NanodataError(f"resume_state_dict: {key} names {name}, which is not a {self.split} file of "
                                    f"{self.data_dir}")

    def _check_unchanged(self, name: str, recorded: list) -> None:
        path = self.files.label(name)
        if not self.files.exists(name):
            raise NanodataError(f"resume_state_dict names {path}, which does not exist")
        for field, then, now in zip(FINGERPRINT, recorded, self.fingerprint(name), strict=False):
            if then != now and None not in (then, now):  # crc32c: None before manifest.json is written
                raise NanodataError(f"{path} changed since the resume state was saved: {field} was {then!r}, "
                                    f"is {now!r}")

    def fingerprint(self, name: str) -> list:
        """[bytes, footer digest, crc32c] of a file, taken the first time it is asked for. crc32c: a local file's from
        manifest.json (None if unlisted), a gs:// object's own (which a manifest of the same file equals)."""
        if name not in self._fingerprints:
            self._fingerprints[name] = self.files.fingerprint(name)
        return self._fingerprints[name]

    def file_records(self, slots) -> list[list]:
        """[slot, name, *fingerprint] of each file: what a state saves of the files it names."""
        return [[slot, self._names[slot], *self.fingerprint(self._names[slot])] for slot in sorted(slots)]

    def seek_nanochat(self, state: dict) -> None:
        """Approximate resume from a nanochat state {pq_idx, rg_idx, epoch}: the next row-group stride, as published."""
        if self.streaming:
            self.pass_files = self._streaming_listing()
        self.epoch = state["epoch"]
        self.file_idx = state["pq_idx"]
        self.rg_idx, self.row = (state["rg_idx"] // self.world_size + 1) * self.world_size + self.rank, 0
        self.epoch_has_docs = True  # the skipped part of this epoch had documents
