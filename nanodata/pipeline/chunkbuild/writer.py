"""JSONL output: exact duplicates dropped (first occurrence wins), nothing half-written.

A fresh output is written to OUTPUT.tmp and renamed into place; appending (for a parquet
writer tailing a growing file) writes whole lines only. Either way `OUTPUT.done` (the run's
summary as JSON) appears last, so a reader knows the file is complete; an appending run removes
it before its first write, so a tailing reader never takes the previous run's marker for this one's.

Appending is crash-idempotent: the run first records where OUTPUT ended (OUTPUT.append, fsynced);
a re-run that finds that record (the previous append was killed) cuts OUTPUT back there first, so
it ends with exactly the bytes one uninterrupted append gives. The record goes after the .done marker.

Exact duplicates are dropped by nanodata.pipeline.dedup.exact's rule (the DAG's bucket tasks apply the same).

Passes that hand docs to a later merge stage them as `staged_line`s: the output line behind a short
header with what the writer needs (the text's digest, tokens, split or not). The merge is one process
for the whole corpus, so the JSON decoding and encoding (and hashing) a staged doc would otherwise cost
there is done once, by the parallel tasks that make the docs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from nanodata.corpus.layout import CHUNK_SUMMARY
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.stored import DocLine
from nanodata.pipeline.chunking.pack import Doc
from nanodata.pipeline.dedup.exact import SeenTexts, digest_of
from nanodata.pipeline.to_parquet import COMPRESSIONS, PROGRESS, Converter
from nanodata.ranges import ROW_GROUP_SIZE
from nanodata.storage.files import atomic_write, commit, commit_together, disk_errors, temp_name

_json_str = json.encoder.encode_basestring  # a str as json.dumps(..., ensure_ascii=False) writes it
CONVERT_BLOCK = 1 << 20  # bytes of lines handed to to-parquet's converter at a time (--parquet-dir)


def doc_line_of(doc: Doc, mode: str) -> DocLine:
    """A doc's output line, made once (in the worker that made the doc, and kept in its file's cache entry): the
    JSON object {"text", "n_tokens", "mode", "source", "lines", "kind"} in two pieces around its source, which is
    the run's (output_line puts it in), with its text's digest."""
    # what json.dumps(..., ensure_ascii=False) writes, by its own string encoder (no encoder object per doc)
    lines = "null" if doc.lines is None else f"[{int(doc.lines[0])}, {int(doc.lines[1])}]"
    head = f'{{"text": {_json_str(doc.text)}, "n_tokens": {int(doc.tokens)}, "mode": {_json_str(mode)}, "source": '
    tail = f', "lines": {lines}, "kind": {_json_str(doc.kind)}}}\n'
    return DocLine(head.encode(), tail.encode(), digest_of(doc.text), doc.tokens, doc.kind == "split")


def output_line(doc: DocLine, source: str) -> bytes:
    """The doc's output line, naming `source`: what json.dumps of the whole object gives, byte for byte."""
    return b"".join((doc.head, json.dumps(source, ensure_ascii=False).encode(), doc.tail))


def staged_line(doc: DocLine, source: str, gid: int) -> bytes:
    """A doc as passes stage it for the merge: "DIGEST TOKENS SPLIT GID\\t" + its output line (the JSON line
    holds no raw tab or newline, so the first tab ends the header and the line ends with the doc). GID is its
    file's, so a file found to be a near-copy can lose its docs after they were made."""
    return f"{doc.digest.hex()} {doc.tokens} {int(doc.split)} {gid}\t".encode() + output_line(doc, source)


def from_staged(line: bytes) -> tuple[bytes, int, bool, int, bytes]:
    """(digest, tokens, split, gid of its file, output line) of a staged line."""
    header, _, out = line.partition(b"\t")
    digest, tokens, split, gid = header.split(b" ")
    return bytes.fromhex(digest.decode("ascii")), int(tokens), split == b"1", int(gid), out


def staged_gid(line: bytes) -> int:
    """The gid of a staged line's file (the header's last field)."""
    return int(line[:line.index(b"\t")].rsplit(b" ", 1)[1])


def work_path(output: Path, what: str) -> Path:
    """A run's work file or directory, next to OUTPUT and named after it: what a killed run left there
    is cleared by the next run, never piled up under fresh random names."""
    return output.with_name(f".{output.name}.{what}")


class JsonlWriter:
    def __init__(self, output: str | os.PathLike, mode: str, append: bool = False):
        self.output = Path(output)
        self.done = self.output.with_name(self.output.name + ".done")
        self.mode = mode
        self.append = append
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.path = self.output if append else temp_name(self.output)
        self.resume = self.output.with_name(self.output.name + ".append")
        if append:
            self._start_append()
        self.file = open(self.path, "ab" if append else "wb")
        self.seen = SeenTexts(work_path(self.output, "seen.sqlite"))
        self.docs = self.tokens = self.split = self.duplicates = 0

    def _start_append(self) -> None:
        self.done.unlink(missing_ok=True)
        if self.resume.exists():  # a killed append: drop what it wrote
            start = json.loads(self.resume.read_text())["offset"]
            with open(self.output, "r+b") as f:
                f.truncate(start)
                os.fsync(f.fileno())
            return
        start = self.output.stat().st_size if self.output.exists() else 0
        atomic_write(self.resume, json.dumps({"offset": start}))

    def write(self, docs: list[DocLine], source: str) -> None:
        """A file's docs (doc_line_of, with this writer's mode), named `source`."""
        self._write([(d.digest, d.tokens, d.split, output_line(d, source)) for d in docs])

    def write_staged(self, lines: list[bytes]) -> None:
        """Docs staged (staged_line) with this writer's mode, written as they are: no JSON parsed or made."""
        self._write([(digest, tokens, split, out) for digest, tokens, split, _, out in map(from_staged, lines)])

    def _write(self, docs: list[tuple[bytes, int, bool, bytes]]) -> None:
        lines = []
        for digest, tokens, split, line in docs:
            if not self.seen.add(digest):
                self.duplicates += 1
                continue
            lines.append(line)
            self.docs += 1
            self.tokens += tokens
            self.split += split
        if lines:
            self._emit(b"".join(lines))

    def _emit(self, lines: bytes) -> None:
        self.file.write(lines)  # whole lines per write: a tailing reader never sees half a doc
        if self.append:
            self.file.flush()

    def commit(self, summary: dict) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.seen.close()
        self.done.unlink(missing_ok=True)
        done = temp_name(self.done)
        with disk_errors(self.done):
            done.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        # the output and its summary appear together: renamed back to back, after both are on disk
        commit_together(*([] if self.append else [(self.path, self.output)]), (done, self.done))
        self.resume.unlink(missing_ok=True)

    def abort(self) -> None:
        """Drop what this run wrote (an append keeps its offset record: the next run truncates to it)."""
        with contextlib.suppress(OSError):  # closing flushes, which fails again on a full disk
            self.file.close()
        self.seen.close()
        if not self.append:
            self.path.unlink(missing_ok=True)


class ParquetDocs(JsonlWriter):
    """`nanodata chunk --parquet-dir`: the lines JsonlWriter would write (same dedupe, same order) go straight to
    to-parquet's Converter, so DIR holds the shards `chunk` + `to-parquet` make with the same --seed,
    --val-fraction and --rows-per-file, with no JSONL in between. Built in a work directory next to DIR
    (shards, val, manifest, the chunk summary, _COMPLETE last), renamed into place once whole."""

    def __init__(self, out_dir: Path, mode: str, *, rows_per_file: int, val_fraction: float, seed: int):
        self.output = Path(out_dir)
        self.mode = mode
        self.append = False
        self.path = work_path(self.output, "tmp")
        shutil.rmtree(self.path, ignore_errors=True)  # a killed run's
        self.path.mkdir(parents=True)
        self.converter = Converter([], self.path, rows_per_file, ROW_GROUP_SIZE.default, val_fraction, seed,
                                   COMPRESSIONS[0], "fail", made_by="chunk --parquet-dir")
        self.session = self.converter.session()
        self.spool = self.session.__enter__()
        self.offset = 0
        self.pending = bytearray()  # lines for the converter, which parses a block at a time
        self.seen = SeenTexts(work_path(self.output, "seen.sqlite"))
        self.docs = self.tokens = self.split = self.duplicates = 0

    def _emit(self, lines: bytes) -> None:
        self.pending += lines
        if len(self.pending) >= CONVERT_BLOCK:
            self._convert()

    def _convert(self) -> None:
        self.converter.consume(str(self.output), self.offset, bytes(self.pending), self.spool)
        self.offset += len(self.pending)
        self.pending.clear()

    def commit(self, summary: dict) -> None:
        self._convert()
        self.session.__exit__(None, None, None)  # the last partial shard
        self.seen.close()
        atomic_write(self.path / CHUNK_SUMMARY, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        self.converter.finish(str(self.output))
        (self.path / PROGRESS).unlink()  # nothing to resume: a killed run starts over
        commit(self.path, self.output)  # over an empty DIR (a non-empty one is refused before the run)

    def abort(self) -> None:
        failed = NanodataError("chunk run failed")
        with contextlib.suppress(Exception):  # the spools are closed, not written out, and removed with the dir
            self.session.__exit__(NanodataError, failed, None)
        self.seen.close()
        shutil.rmtree(self.path, ignore_errors=True)
