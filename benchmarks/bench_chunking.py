"""C++ chunker throughput against the two things it cannot avoid: tokenizing and parsing.

Real trees, one worker, this process's CPU time (other jobs on the shared machine skew it less than wall time),
every process-wide start-up cost (the tokenizer's tables, the page cache) paid by a warm-up run first, cleaning
and near-dedup off (CHUNKER_ONLY: not the chunker's work). References: (a) tokenizing every file whole with
tiktoken, (b) parsing every file with tree-sitter, L = 1/(1/a + 1/b) (the chunker needs both for a file it
splits), and the necessary work of basic mode at each budget (tokenizing every file, parsing only the files over
the budget: the most a basic chunker can reach). --runs rounds each time every reference and every
`chunk_to_jsonl` run below once, in turn; a ratio is taken within its round, and the median of the rounds is
printed with their range (this VM's speed drifts by tens of percent within minutes: a reference timed minutes
before its run would carry that drift into the ratio):
- basic, --max-tokens 16384 (most files fit whole: tokenized and emitted as read, never parsed): goal >= 0.85x
  its ceiling (the necessary work above);
- basic, --max-tokens 2048: goal >= 0.75 L;
- compilable, --max-tokens 2048: goal >= 0.45 L.
Then 1 -> 2 workers (wall time; goal >= 1.7x) and, with --profile, cProfile's top functions of each chunk run.

Trees: the libstdc++ headers of this machine (bits/), the fmt library torch's wheel ships, and every directory in
NANODATA_BENCH_TREES (colon-separated, e.g. checkouts of google/leveldb, google/re2, leethomason/tinyxml2);
with --only-listed-trees, those directories alone (e.g. the issue's eight projects).

    .venv/bin/python benchmarks/bench_chunking.py [--runs 5] [--profile] [--no-workers] [--only-listed-trees]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import os
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import tree_sitter_cpp
from tree_sitter import Language, Parser

from nanodata.pipeline.chunkbuild import chunk_to_jsonl
from nanodata.pipeline.chunking.modes import as_doc
from nanodata.settings import CPP_EXTENSIONS
from nanodata.tokenizer import load

STD = Path("/usr/include/c++/12/bits")
FMT = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "include" / "fmt"
# (mode, --max-tokens, reference: "ceiling" (basic's necessary work at that budget) or "L", goal)
# the chunker's own work: cleaning and near-dedup are measured by bench_cleaning.py and bench_near_dedup.py
CHUNKER_ONLY = {"filters": "none", "redact": "none", "dedup": "exact"}
RUNS = [("basic", 16384, "ceiling", 0.85), ("basic", 2048, "L", 0.75), ("compilable", 2048, "L", 0.45)]


def _best_of(runs: int, fn, clock=time.process_time) -> float:
    return min(_timed(fn, clock) for _ in range(runs))


def _timed(fn, clock=time.process_time) -> float:
    start = clock()
    fn()
    return clock() - start


def _line(name, measured, unit, reference, ref_unit, ratio, goal=None):
    goal_text = f" (goal >= {goal})" if goal is not None else ""
    print(f"{name}: measured {measured:.2f} {unit} | reference {reference:.2f} {ref_unit} | "
          f"ratio {ratio:.2f}{goal_text}", flush=True)


def trees(only_listed: bool = False) -> list[Path]:
    extra = [Path(p) for p in os.environ.get("NANODATA_BENCH_TREES", "").split(":") if p]
    return [tree for tree in ([] if only_listed else [STD, FMT]) + extra if tree.is_dir()]


def copy_trees(root: Path, only_listed: bool = False) -> list[Path]:
    """Each tree's C++ files as a project under root (libstdc++'s extensionless headers are left out)."""
    for number, tree in enumerate(trees(only_listed)):
        for path in sorted(tree.rglob("*")):
            if path.is_file() and path.suffix.lower() in CPP_EXTENSIONS:
                target = root / f"{number}-{tree.name}" / path.relative_to(tree)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return sorted(p for p in root.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds (default: 5)")
    parser.add_argument("--profile", action="store_true", help="cProfile each chunk run, print the top functions")
    parser.add_argument("--no-workers", action="store_true", help="skip the 1 -> 2 workers figures")
    parser.add_argument("--only-listed-trees", action="store_true",
                        help="the NANODATA_BENCH_TREES directories alone, without libstdc++ and torch's fmt")
    args = parser.parse_args([] if __name__ != "__main__" else None)
    ts_parser = Parser(Language(tree_sitter_cpp.language()))
    encode = load("cl100k_base").encoding.encode_ordinary
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "projects"
        files = copy_trees(root, args.only_listed_trees)
        datas = [p.read_bytes() for p in files]
        texts = [d.decode("utf-8", "replace") for d in datas]
        mb = sum(map(len, datas)) / 1e6
        print(f"corpus: {len(files)} files, {mb:.2f} MB from {', '.join(map(str, trees(args.only_listed_trees)))}; 1 worker, CPU time, "
              f"{args.runs} rounds", flush=True)

        def run(mode, max_tokens, workers=1):
            chunk_to_jsonl(Path(tmp) / f"{mode}.jsonl", project_dirs=sorted(root.iterdir()), mode=mode,
                           max_tokens=max_tokens, workers=workers, **CHUNKER_ONLY)

        run("basic", 2048)  # warm: tokenizer tables, page cache
        # what a budget's run cannot do without: tokenize every file, parse those over the budget (a fitting
        # file is emitted whole, unparsed): the most any basic chunker reaches, beside the goal's reference
        counts = [len(encode(as_doc(t))) for t in texts]
        budgets = sorted({m for mode, m, _, _ in RUNS if mode == "basic"}, reverse=True)
        over = {m: [d for d, n in zip(datas, counts, strict=True) if n > m] for m in budgets}
        # Rounds: every reference and every chunk run once per round, in turn, each ratio taken within its round
        # and the median quoted: this VM's speed drifts by tens of percent within minutes, which a reference timed
        # minutes before its run would put into the ratio.
        rounds = []
        for _ in range(args.runs):
            timed = {"tokenize": _timed(lambda: [encode(t) for t in texts]),
                     "parse": _timed(lambda: [ts_parser.parse(d) for d in datas])}
            for m in budgets:
                timed[f"parse over {m}"] = _timed(lambda m=m: [ts_parser.parse(d) for d in over[m]])
            for mode, max_tokens, _, _ in RUNS:
                timed[(mode, max_tokens)] = _timed(lambda mode=mode, max_tokens=max_tokens: run(mode, max_tokens))
            rounds.append(timed)
        references = {"L": lambda r: r["tokenize"] + r["parse"]}
        tokenize, parse, limit = (mb / statistics.median([fn(r) for r in rounds])
                                  for fn in (lambda r: r["tokenize"], lambda r: r["parse"], references["L"]))
        print(f"tokenize-only (a) {tokenize:.2f} MB/s, tree-sitter parse-only (b) {parse:.2f} MB/s, "
              f"L = 1/(1/a+1/b) {limit:.2f} MB/s (medians of {args.runs} rounds)", flush=True)
        for m in budgets:
            references[f"ceiling {m}"] = lambda r, m=m: r["tokenize"] + r[f"parse over {m}"]
            print(f"basic {m} necessary work: tokenize all + parse the {len(over[m])} files over the budget "
                  f"({sum(map(len, over[m])) / 1e6:.2f} MB): {mb / statistics.median([references[f'ceiling {m}'](r) for r in rounds]):.2f} "
                  f"MB/s, {statistics.median([references[f'ceiling {m}'](r) / r['tokenize'] for r in rounds]):.2f}x the time of "
                  "tokenize-only", flush=True)
        for mode, max_tokens, against, goal in RUNS:
            name = against if against == "L" else f"{against} {max_tokens}"
            ratios = sorted(references[name](r) / r[(mode, max_tokens)] for r in rounds)
            rate = mb / statistics.median([r[(mode, max_tokens)] for r in rounds])
            reference = mb / statistics.median([references[name](r) for r in rounds])
            print(f"chunk {mode} {max_tokens}: measured {rate:.2f} MB/s | reference {reference:.2f} MB/s ({name}) | "
                  f"ratio {statistics.median(ratios):.2f} (median of {len(ratios)} rounds, {ratios[0]:.2f}..{ratios[-1]:.2f}; "
                  f"goal >= {goal})", flush=True)
        if args.profile:
            for mode, max_tokens, _, _ in RUNS:
                profile = cProfile.Profile()
                profile.runcall(run, mode, max_tokens)
                out = io.StringIO()
                pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
                print(f"profile: chunk {mode} {max_tokens}, top 15 by own time\n"
                      + "\n".join(out.getvalue().splitlines()[6:]), flush=True)
        if not args.no_workers:
            print(f"load average (other jobs share these {os.cpu_count()} cores): {os.getloadavg()[0]:.2f}")
            for mode in ("basic", "compilable"):
                one = _best_of(2, lambda mode=mode: run(mode, 2048), time.perf_counter)
                two = _best_of(2, lambda mode=mode: run(mode, 2048, workers=2), time.perf_counter)
                _line(f"chunk {mode} 2048 1 -> 2 workers", one / two, "x", 1.0, "x (1 worker)", one / two, 1.7)


if __name__ == "__main__":
    main()
