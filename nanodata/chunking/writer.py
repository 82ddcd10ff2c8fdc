"""JSONL output: exact duplicates dropped, nothing half-written.

A fresh output is written to OUTPUT.tmp and renamed into place; appending (for a parquet
writer tailing a growing file) writes whole lines only. Either way `OUTPUT.done` (the run's
summary as JSON) appears last, so a reader knows the file is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from nanodata.chunking.pack import Doc


class JsonlWriter:
    def __init__(self, output: str | os.PathLike, mode: str, append: bool = False):
        self.output = Path(output)
        self.done = self.output.with_name(self.output.name + ".done")
        self.mode = mode
        self.append = append
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.path = self.output if append else self.output.with_name(self.output.name + ".tmp")
        self.file = open(self.path, "a" if append else "w", encoding="utf-8")
        self.seen: set[bytes] = set()
        self.docs = self.tokens = self.split = self.duplicates = 0

    def write(self, docs: list[Doc]) -> None:
        lines = []
        for doc in docs:
            digest = hashlib.blake2b(doc.text.encode("utf-8"), digest_size=16).digest()
            if digest in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(digest)
            lines.append(json.dumps({"text": doc.text, "n_tokens": doc.tokens, "mode": self.mode,
                                     "source": doc.source, "kind": doc.kind}, ensure_ascii=False) + "\n")
            self.docs += 1
            self.tokens += doc.tokens
            self.split += doc.kind == "split"
        if lines:
            self.file.write("".join(lines))  # whole lines per write: a tailing reader never sees half a doc
            if self.append:
                self.file.flush()

    def commit(self, summary: dict) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.done.unlink(missing_ok=True)
        if not self.append:
            os.replace(self.path, self.output)
        tmp = self.done.with_name(self.done.name + ".tmp")
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.done)

    def abort(self) -> None:
        self.file.close()
        if not self.append:
            self.path.unlink(missing_ok=True)
