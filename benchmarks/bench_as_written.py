"""Docs as written, on real trees: how much of each file reaches its docs exactly as it stands in the file.

Per run (basic 16384, basic 2048, dep-aware 2048; cleaning off, so the text is the source's): files emitted whole
that equal the file (the reference: every file emitted whole), lines kept as written (blank lines, indentation and
trailing spaces counted; the reference: every line of every file), and, for basic mode, split files whose docs'
bodies (`lines`) put back in order are the file (the reference: every split file). Trees: the libstdc++ headers of
this machine (bits/) and every directory in NANODATA_BENCH_TREES (colon-separated, e.g. checkouts of google/leveldb,
google/re2, fmtlib/fmt, leethomason/tinyxml2), each a project.

    .venv/bin/python benchmarks/bench_as_written.py
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.fidelity import source_lines
from nanodata.pipeline.chunking.modes import as_doc
from nanodata.settings import CPP_EXTENSIONS

STD = Path("/usr/include/c++/12/bits")
RUNS = [("basic", 16384), ("basic", 2048), ("dep-aware", 2048)]


def trees() -> list[Path]:
    extra = [Path(p) for p in os.environ.get("NANODATA_BENCH_TREES", "").split(":") if p]
    return [tree for tree in [STD, *extra] if tree.is_dir()]


def _line(name: str, measured: int, reference: int) -> None:
    print(f"{name}: measured {measured:,} | reference {reference:,} | ratio {measured / max(reference, 1):.4f} "
          f"(goal 1)", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "projects"
        for tree in trees():
            for path in sorted(tree.rglob("*")):
                if path.is_file() and (path.suffix.lower() in CPP_EXTENSIONS or tree == STD):
                    target = root / tree.name / path.relative_to(tree)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, target)
        print(f"trees: {', '.join(str(t) for t in trees())}", flush=True)
        for mode, budget in RUNS:
            out = Path(tmp) / f"{mode}-{budget}.jsonl"
            chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=budget, filters="none", redact="none",
                           dedup="exact")
            docs = defaultdict(list)
            with out.open() as f:
                for line in f:
                    doc = json.loads(line)
                    docs[doc["source"]].append(doc)
            whole = equal = lines = kept = split = tiled = 0
            for source, held in docs.items():
                text = as_doc((root / source).read_bytes().decode("utf-8", "surrogateescape"))
                wanted = source_lines(text)
                found = Counter(source_lines("".join(d["text"] for d in held)))
                lines += len(wanted)
                kept += sum(min(n, found[line]) for line, n in Counter(wanted).items())
                if len(held) == 1 and held[0]["kind"] == "file":
                    whole += 1
                    equal += held[0]["text"] == text
                elif mode == "basic":
                    split += 1
                    rows = text.splitlines(keepends=True)
                    bodies = "".join("".join(rows[d["lines"][0] - 1:d["lines"][1]]) for d in held)
                    tiled += bodies == text and all("".join(rows[d["lines"][0] - 1:d["lines"][1]]) in d["text"]
                                                    for d in held)
            print(f"--- {mode} {budget}: {len(docs):,} files", flush=True)
            if whole:
                _line("  files emitted whole, equal to the file", equal, whole)
            _line("  lines kept as written", kept, lines)
            if split:
                _line("  split files whose docs' bodies, in order, are the file", tiled, split)


if __name__ == "__main__":
    main()
