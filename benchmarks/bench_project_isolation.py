"""How many of a project's docs change when neighbours sit beside it(goal 0).

A real C++ tree (default: the fmt library torch ships, ~600 KB) is chunked alone, then next to a
vendored copy of itself (one comment changed per file, as a vendored copy drifts) and an unrelated
real project (default: pybind11), in cross-file and compilable modes. Only the project's own docs
(sources under its name) are compared: docs gone and docs new, as multisets of texts. The copy is
named to sort after the project, so the exact dedupe (first occurrence wins) keeps the project's docs.

    .venv/bin/python benchmarks/bench_project_isolation.py [--project DIR] [--unrelated DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from nanodata.pipeline.chunkbuild import chunk_to_jsonl

# real trees torch's wheel ships (found without importing torch)
SITE = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "include"


def copy_tree(src: Path, dst: Path, mark: str | None = None) -> None:
    """Copy the C++ files of src to dst; with `mark`, change one comment per file (or add one)."""
    for path in sorted(src.rglob("*")):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if mark is not None:
                text, n = re.subn(r"// ", f"// {mark} ", text, count=1)
                text = text if n else f"// {mark}\n{text}"
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")


def project_docs(root: Path, mode: str, name: str, out: Path) -> tuple[Counter, dict]:
    summary = chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=2048)
    with open(out, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    return Counter(d["text"] for d in docs if d["source"].startswith(name + "/")), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=SITE / "fmt")
    parser.add_argument("--unrelated", type=Path, default=SITE / "pybind11")
    args = parser.parse_args()
    name = args.project.name
    with tempfile.TemporaryDirectory(prefix="nanodata-isolation-") as tmp:
        tmp = Path(tmp)
        alone, beside = tmp / "alone", tmp / "beside"
        copy_tree(args.project, alone / name)
        copy_tree(args.project, beside / name)
        copy_tree(args.project, beside / f"vendored_{name}", mark="vendored:")
        copy_tree(args.unrelated, beside / args.unrelated.name)
        for mode in ("cross-file", "compilable"):
            started = time.perf_counter()
            before, _ = project_docs(alone, mode, name, tmp / f"{mode}-alone.jsonl")
            after, summary = project_docs(beside, mode, name, tmp / f"{mode}-beside.jsonl")
            gone, new = sum((before - after).values()), sum((after - before).values())
            ambiguous = summary.get("ambiguous_by_project", "n/a")
            print(f"{mode:>10}: {name} alone {sum(before.values())} docs; beside vendored_{name} + "
                  f"{args.unrelated.name}: {gone} gone, {new} new (goal 0, 0); ambiguous names by project "
                  f"{ambiguous}  [{time.perf_counter() - started:.0f} s]")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
