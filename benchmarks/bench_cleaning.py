"""Cleaning before chunking (nanodata/pipeline/cleaning): what the default filters and redaction cost a chunk run,
how fast each stage is, and what the defaults do to real C++.

1. The cost: `nanodata chunk` with the defaults (filters generated, long-lines, alpha, encoded; redaction of
   secrets, emails, ips) against the same run with `--filters none --redact none`, and the defaults plus
   `--decontaminate` of a synthetic benchmark file, on the same real tree (--corpus DIR, each subdirectory a
   project; default /work/eight if it exists, else a temp tree of /usr/include/c++/12's bits, ext, tr1, debug
   and pstl as projects, extensionless headers given ".hpp"): basic, one worker, --max-tokens 2048,
   --dedup exact (near-dedup does not enter), JSONL into a temp dir. CPU time (user + sys) of the child
   (getrusage(RUSAGE_CHILDREN) deltas), --runs runs of each taken in turns (the order rotates every run),
   medians; goal defaults / none <= 1.10, and the same goal for defaults + decontaminate / none. The files the
   defaults drop are not chunked, which saves what chunking them would cost: their bytes are printed beside.
   The benchmark file: 3,000 items (--items) of ~600 bytes (500-700 characters), random slices of files outside
   the tree (/usr/include/c++/12/bits when the tree is not made of it, else the rest of /usr/include/c++/12;
   past each file's first 2,000 characters, so not its license header), of which --matching-items (default
   3) are slices of the tree's own files: those drop the files they were cut from (few, since a dropped file is
   not chunked), the others drop what shares their code (in /work/eight: nothing).
2. Per stage speed, in this process on the same files' texts (read as chunk reads them): the four filters
   together (as Cleaning runs them: the first drop ends a file), the redactor (all three kinds), the
   decontaminator with the same 3,000 items (its automaton built before the clock starts; the build is timed
   alone), the always-on checks (empty, binary, undecodable: in both runs of 1), and for reference the
   tokenizer every chunk run pays (pack.counter_for("cl100k_base").count(text), whole files). CPU time of this
   process (time.process_time), best of 3 taken in turns. MB/s each (MB = 10^6 bytes of UTF-8) beside the
   chunk run's MB/s (the `--filters none --redact none` run of 1, median CPU s; one such run is made if 1 is
   not), and the share: chunk MB/s / stage MB/s, the fraction a stage adds to that run.
3. What the defaults do (ChunkConfig().cleaning, run through Cleaning.clean) on (a) every file of
   /usr/include/c++/12/bits and (b) the real C++ under this checkout's tests/ (every .h/.cc/.cpp/.hpp/.tcc,
   tests/pipeline/chunking/fidelity_cases included): the files each filter drops with the figure that decided it,
   and the redactions by kind with the files, detectors and lines (never the redacted text).

All three by default (~4 min on 2 cores with /work/eight); --cost, --stages, --effects pick some.

    .venv/bin/python benchmarks/bench_cleaning.py [--cost] [--stages] [--effects] [--corpus DIR|libstdc++]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from nanodata.pipeline.chunkbuild.config import ChunkConfig
from nanodata.pipeline.chunkbuild.sources import Problem, tree_files
from nanodata.pipeline.chunking.pack import counter_for
from nanodata.pipeline.cleaning.decontaminate import Decontaminator
from nanodata.pipeline.cleaning.filters import BUILTIN_FILTERS, DEFAULT_FILTERS, make_filters
from nanodata.pipeline.cleaning.redact import DEFAULT_REDACT, Redactor
from nanodata.pipeline.cleaning.stages import Cleaning
from nanodata.settings import CPP_EXTENSIONS

EIGHT = Path("/work/eight")
LIBSTDCXX = Path("/usr/include/c++/12")
LIBSTDCXX_PROJECTS = ("bits", "ext", "tr1", "debug", "pstl")
TESTS = Path(__file__).resolve().parent.parent / "tests"
TEST_EXTENSIONS = (".h", ".cc", ".cpp", ".hpp", ".tcc")
MAX_TOKENS = 2048
GOAL = 1.10
ITEMS = 3000
MATCHING_ITEMS = 3         # few: the files they match are not chunked, which would flatter the decontaminate run
ITEM_CHARS = (500, 700)
SKIP_HEAD_CHARS = 2000      # items are cut past this, so not from the license header every libstdc++ file shares
STAGE_RUNS = 3
SEED = 0
MB = 1e6
VARIANTS = ("defaults", "none", "decontaminate")


def _line(name, measured, unit, reference, ref_unit, ratio, goal=None):
    goal_text = f" (goal {goal})" if goal is not None else ""
    print(f"{name}: measured {measured:,.2f} {unit} | reference {reference:,.2f} {ref_unit} | "
          f"ratio {ratio:.3f}{goal_text}", flush=True)


# ---------------------------------------------------------------- the tree, its texts, the benchmark items

def make_libstdcxx_tree(tmp: Path) -> Path:
    """bits, ext, tr1, debug, pstl of libstdc++ 12 as projects (files copied; extensionless headers + ".hpp")."""
    root = tmp / "libstdcxx"
    for project in LIBSTDCXX_PROJECTS:
        for dirpath, dirnames, filenames in os.walk(LIBSTDCXX / project):
            dirnames.sort()
            for name in sorted(filenames):
                src = Path(dirpath) / name
                if src.is_symlink() or not src.is_file():
                    continue
                dest = root / src.relative_to(LIBSTDCXX)
                if not name.lower().endswith(CPP_EXTENSIONS):
                    dest = dest.with_name(name + ".hpp")
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
    return root


def tree_texts(root: Path) -> list[tuple[str, str]]:
    """("project/path", text) of every file `nanodata chunk --project-dirs root` reads, decoded as it decodes."""
    found = []
    for rel, _size in tree_files(str(root), CPP_EXTENSIONS):
        if isinstance(rel, Problem):
            continue
        found.append((rel, (root / rel).read_bytes().decode("utf-8", "surrogateescape")))
    return found


def outside_texts(libstdcxx_tree: bool) -> tuple[str, list[str]]:
    """Where the non-matching items come from, and those files' texts."""
    if libstdcxx_tree:
        where = f"{LIBSTDCXX} less {', '.join(LIBSTDCXX_PROJECTS)}"
        skip = {LIBSTDCXX / p for p in LIBSTDCXX_PROJECTS}
        base = LIBSTDCXX
    else:
        where, skip, base = str(LIBSTDCXX / "bits"), set(), LIBSTDCXX / "bits"
    texts = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if Path(dirpath) / d not in skip)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                texts.append(path.read_bytes().decode("utf-8", "replace"))
    return where, texts


def _slices(texts: list[str], count: int, rng: random.Random) -> list[str]:
    pool = [t for t in texts if len(t) >= SKIP_HEAD_CHARS + ITEM_CHARS[1] and t.strip()]
    out = []
    while len(out) < count:
        text = rng.choice(pool)
        size = rng.randint(*ITEM_CHARS)
        start = rng.randint(SKIP_HEAD_CHARS, len(text) - size)
        piece = text[start:start + size]
        if len(piece.split()) >= 20:  # not a run of blank lines or one table row
            out.append(piece)
    return out


def write_items(path: Path, tree: list[tuple[str, str]], outside: list[str], items: int, matching: int) -> None:
    """`matching` slices of the tree's files (ids tree/N), the rest of files outside it (ids outside/N)."""
    rng = random.Random(SEED)
    with path.open("w") as f:
        for i, text in enumerate(_slices([t for _, t in tree], matching, rng)):
            f.write(json.dumps({"task_id": f"tree/{i}", "text": text}) + "\n")
        for i, text in enumerate(_slices(outside, items - matching, rng)):
            f.write(json.dumps({"task_id": f"outside/{i}", "text": text}) + "\n")


# ---------------------------------------------------------------- 1. the cost in a chunk run

def chunk_once(tree: Path, out: Path, extra: list[str]) -> tuple[float, dict]:
    cli = [sys.executable, "-m", "nanodata.cli", "chunk"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*cli, "--project-dirs", str(tree), "--output", str(out), "--mode", "basic",
                           "--max-tokens", str(MAX_TOKENS), "--workers", "1", "--dedup", "exact", "--no-progress",
                           *extra], capture_output=True, text=True, env=dict(os.environ, TQDM_DISABLE="1"))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"chunk {' '.join(extra)} exited {done.returncode}: {done.stderr[-3000:]}")
    summary = json.loads(Path(f"{out}.done").read_text())
    out.unlink()
    Path(f"{out}.done").unlink()
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, summary


def _dropped(summary: dict) -> tuple[dict, int]:
    cleaning = summary.get("cleaning") or {}
    by_reason = {reason: v.get("files", 0) for reason, v in (cleaning.get("dropped") or {}).items()}
    return by_reason, cleaning.get("bytes_dropped", 0)


def bench_cost(tree: Path, items_file: Path, items: int, tmp: Path, runs: int) -> tuple[float, int]:
    """Returns the median CPU s of the `--filters none --redact none` run and the bytes it read."""
    extras = {"defaults": [], "none": ["--filters", "none", "--redact", "none"],
              "decontaminate": ["--decontaminate", str(items_file)]}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    summaries = {}
    for r in range(runs):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
        for variant in order:
            seconds, summaries[variant] = chunk_once(tree, tmp / f"{variant}.jsonl", extras[variant])
            cpu[variant].append(seconds)
    med = {v: statistics.median(cpu[v]) for v in VARIANTS}
    none = summaries["none"]
    print(f"chunk {tree} (basic, 1 worker, --max-tokens {MAX_TOKENS}, --dedup exact): {none['files_read']:,} files, "
          f"{none['bytes_read'] / MB:,.1f} MB; CPU s per run "
          + "; ".join(f"{v} {', '.join(f'{s:.2f}' for s in cpu[v])}" for v in VARIANTS), flush=True)
    for variant in VARIANTS:
        s = summaries[variant]
        by_reason, dropped_bytes = _dropped(s)
        redactions = (s.get("cleaning") or {}).get("redactions") or {}
        print(f"  {variant}: docs {s['docs']:,}, files dropped {sum(by_reason.values())} "
              f"({dropped_bytes / MB:.2f} MB: {', '.join(f'{k} {n}' for k, n in sorted(by_reason.items())) or '-'}), "
              f"redactions {dict(sorted(redactions.items())) or '-'}", flush=True)
    matched = Counter(item.split("/")[0] for item, n in
                      ((summaries["decontaminate"].get("cleaning") or {}).get("items") or {}).items() for _ in range(n))
    print(f"  decontaminate: files dropped by items cut from the tree {matched['tree']}, by items from outside it "
          f"{matched['outside']}", flush=True)
    _line(f"chunk defaults vs --filters none --redact none, median CPU s of {runs} in turns", med["defaults"],
          "CPU s (defaults)", med["none"], "CPU s (none)", med["defaults"] / med["none"], f"<= {GOAL}")
    _line(f"chunk defaults + --decontaminate ({items:,} items) vs none, median CPU s of {runs} in turns",
          med["decontaminate"], "CPU s (defaults + decontaminate)", med["none"], "CPU s (none)",
          med["decontaminate"] / med["none"], f"<= {GOAL}")
    low = {v: min(cpu[v]) for v in VARIANTS}
    print(f"  (decontaminate vs defaults alone: ratio {med['decontaminate'] / med['defaults']:.3f}; the fastest run "
          f"of each instead of the median: defaults/none {low['defaults'] / low['none']:.3f}, decontaminate/none "
          f"{low['decontaminate'] / low['none']:.3f})", flush=True)
    return med["none"], none["bytes_read"]


# ---------------------------------------------------------------- 2. per stage speed

def bench_stages(texts: list[tuple[str, str]], items_file: Path, items: int, chunk_none_s: float,
                 chunk_bytes: int) -> None:
    total = sum(len(t.encode("utf-8", "surrogatepass")) for _, t in texts)
    filters = Cleaning(filters=make_filters(DEFAULT_FILTERS))
    builtin = Cleaning(filters=BUILTIN_FILTERS)
    redactor = Redactor(DEFAULT_REDACT)
    t0 = time.process_time()
    decon = Decontaminator((str(items_file),))
    loaded = time.process_time() - t0
    t0 = time.process_time()
    decon.keep("warm-up", "")  # builds the automaton
    built = time.process_time() - t0
    counter = counter_for("cl100k_base")
    redactor.apply(texts[0][1])  # detectors built before the clock

    def run_filters(cleaning):
        return sum(cleaning.clean(src, text)[1] is not None for src, text in texts)

    stages = {
        "filters (generated, long-lines, alpha, encoded)": lambda: run_filters(filters),
        "redactor (secrets, emails, ips)": lambda: sum(sum(redactor.apply(t)[1].values()) for _, t in texts),
        f"decontaminator ({items:,} items)": lambda: Counter(
            drop.item.split("/")[0] for src, t in texts if (drop := decon.keep(src, t)) is not None),
        "always-on checks (empty, binary, undecodable)": lambda: run_filters(builtin),
        "tokenizer cl100k_base count (reference)": lambda: sum(counter.count(t) for _, t in texts),
    }
    best = {name: float("inf") for name in stages}
    results = {}
    for _ in range(STAGE_RUNS):
        for name, fn in stages.items():
            t0 = time.process_time()
            results[name] = fn()
            best[name] = min(best[name], time.process_time() - t0)
    chunk_mbps = chunk_bytes / MB / chunk_none_s
    print(f"{len(texts):,} files, {total / MB:,.2f} MB (the chunk run read {chunk_bytes / MB:,.2f} MB at "
          f"{chunk_mbps:.2f} MB/s, CPU, --filters none --redact none); decontaminator: items loaded in "
          f"{loaded:.2f} s, automaton built in {built:.2f} s", flush=True)
    what = ["files dropped", "redactions", "files dropped", "files dropped", "tokens"]
    for (name, seconds), label in zip(best.items(), what, strict=True):
        mbps = total / MB / seconds
        result = results[name]
        if isinstance(result, Counter):  # the decontaminator's drops by where the item was cut
            result = f"{sum(result.values())} (tree items {result['tree']}, outside {result['outside']})"
        else:
            result = f"{result:,}"
        _line(f"{name} [{result} {label}], best CPU of {STAGE_RUNS}", mbps, "MB/s", chunk_mbps,
              "MB/s (chunk run)", chunk_mbps / mbps)
    added = sum(chunk_mbps / (total / MB / best[n]) for n in list(stages)[:2])
    print(f"  filters + redactor shares: {added:.3f} of the chunk run (what 1's defaults/none ratio should show "
          f"over 1); with the decontaminator {added + chunk_mbps / (total / MB / best[list(stages)[2]]):.3f}",
          flush=True)


# ---------------------------------------------------------------- 3. what the defaults do on real trees

def effects(label: str, files: list[Path], base: Path, cleaning: Cleaning) -> None:
    redactor = next((t for t in cleaning.transforms if isinstance(t, Redactor)), None)
    drops: dict[str, list[tuple[str, str]]] = defaultdict(list)
    kinds: Counter = Counter()
    per_file = []
    total = 0
    for path in files:
        text = path.read_bytes().decode("utf-8", "surrogateescape")
        total += len(text.encode("utf-8", "surrogateescape"))
        name = str(path.relative_to(base))
        cleaned, drop, changes = cleaning.clean(name, text)
        if drop is not None:
            drops[drop.reason].append((name, drop.figure))
            continue
        if changes:
            kinds.update(changes)
            found = redactor.find(text) if redactor is not None else []
            detail: dict[tuple[str, str], list[int]] = defaultdict(list)
            for r in found:
                detail[(r.kind, r.detector)].append(text.count("\n", 0, r.start) + 1)
            if Counter(r.kind for r in found) != changes:
                raise RuntimeError(f"{name}: Redactor.find disagrees with Cleaning.clean's counts")
            per_file.append((name, detail))
    kept = len(files) - sum(len(v) for v in drops.values())
    print(f"{label}: {len(files):,} files, {total / MB:.2f} MB; kept {kept:,}, dropped "
          f"{len(files) - kept:,}; redactions {dict(sorted(kinds.items())) or 'none'} in {len(per_file)} files",
          flush=True)
    for reason in [f.name for f in cleaning.filters]:
        listed = drops.get(reason, [])
        if listed or reason in DEFAULT_FILTERS:
            print(f"  dropped by {reason}: {len(listed)}", flush=True)
        for name, figure in listed:
            print(f"    {name}: {figure}", flush=True)
    for name, detail in per_file:
        parts = [f"{kind} x{len(lines)} ({detector}; line{'s' if len(lines) > 1 else ''} "
                 f"{', '.join(map(str, lines[:8]))}{', ...' if len(lines) > 8 else ''})"
                 for (kind, detector), lines in sorted(detail.items())]
        print(f"  redacted in {name}: {'; '.join(parts)}", flush=True)


def bench_effects() -> None:
    cleaning = ChunkConfig().cleaning
    print(f"Cleaning of ChunkConfig(): filters {', '.join(f.name for f in cleaning.filters)}; "
          f"transforms {', '.join(repr(t) for t in cleaning.transforms)}", flush=True)
    bits = sorted(p for p in (LIBSTDCXX / "bits").rglob("*") if p.is_file() and not p.is_symlink())
    effects(f"(a) {LIBSTDCXX / 'bits'}", bits, LIBSTDCXX, cleaning)
    tests = sorted(p for p in TESTS.rglob("*") if p.is_file() and p.name.lower().endswith(TEST_EXTENSIONS))
    effects(f"(b) {TESTS} (C++ files)", tests, TESTS.parent, cleaning)


# ---------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--cost", action="store_true", help="1: chunk defaults vs --filters none --redact none")
    parser.add_argument("--stages", action="store_true", help="2: per stage speed in one process")
    parser.add_argument("--effects", action="store_true", help="3: what the defaults drop and redact in real trees")
    parser.add_argument("--corpus", default=None,
                        help=f"real C++ tree for 1 and 2, each subdirectory a project (default {EIGHT} if it exists, "
                             f"else 'libstdc++': a temp tree of {LIBSTDCXX}'s {', '.join(LIBSTDCXX_PROJECTS)})")
    parser.add_argument("--runs", type=int, default=3, help="1: runs of each, in turns (default 3)")
    parser.add_argument("--items", type=int, default=ITEMS, help=f"benchmark items (default {ITEMS:,})")
    parser.add_argument("--matching-items", type=int, default=MATCHING_ITEMS,
                        help=f"of those, cut from the tree's own files (default {MATCHING_ITEMS})")
    args = parser.parse_args()
    everything = not (args.cost or args.stages or args.effects)
    corpus = args.corpus or (str(EIGHT) if EIGHT.is_dir() else "libstdc++")
    print(f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-cleaning-") as tmp_name:
        tmp = Path(tmp_name)
        if args.cost or args.stages or everything:
            libstdcxx_tree = corpus == "libstdc++"
            tree = make_libstdcxx_tree(tmp) if libstdcxx_tree else Path(corpus)
            texts = tree_texts(tree)
            where, outside = outside_texts(libstdcxx_tree)
            items_file = tmp / "benchmark_items.jsonl"
            write_items(items_file, texts, outside, args.items, args.matching_items)
            print(f"tree {corpus}: {len(texts):,} files; benchmark items: {args.items:,} "
                  f"({args.matching_items} cut from the tree's files, the rest from {where})", flush=True)
            if args.cost or everything:
                print("--- 1. the cost in a chunk run", flush=True)
                chunk_none_s, chunk_bytes = bench_cost(tree, items_file, args.items, tmp, args.runs)
            else:  # 2's reference: one chunk run
                chunk_none_s, summary = chunk_once(tree, tmp / "reference.jsonl", ["--filters", "none", "--redact", "none"])
                chunk_bytes = summary["bytes_read"]
            if args.stages or everything:
                print("--- 2. per stage speed (one process)", flush=True)
                bench_stages(texts, items_file, args.items, chunk_none_s, chunk_bytes)
        if args.effects or everything:
            print("--- 3. what the defaults do on real trees", flush=True)
            bench_effects()


if __name__ == "__main__":
    main()
