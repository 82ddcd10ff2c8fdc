"""How faithful chunks are to their source, and how fast, next to a reference chunker in the same run.

Per real tree and mode (basic, compilable; --max-tokens 2048): the share of the tree's non-blank lines its
docs keep (goal 100%), the share of docs whose `{}` and `()` balance (braces.balanced), and docs/s and
MB/s of `chunk_to_jsonl` with one worker (CPU time of the child process, so other jobs on the machine
skew it less). Both are measured the same way on this checkout and on a reference revision (`git archive
REV`, default REFERENCE), each in a child process that imports it first and stays up: the two children
take turns run by run (this, ref, then ref, this, ...), so a run of each meets the same machine. This shared
2-core machine's speed drifts by up to 40% over seconds; a ratio of two best times taken a few seconds apart
drifts with it, the median of the ratios of runs taken side by side much less. Figures come from the
output JSONL with this checkout's fidelity module; the ratios this/reference next to them: of the best
times, and the paired median (speed goal: >= 0.85).

Trees: the libstdc++ subset of the tests (tests/pipeline/chunking/cpp_projects.py: STD_SUBSET), the fmt
library torch's wheel ships, and the test trees (tests/pipeline/chunking/fidelity_cases and the `shapes`
project of cpp_projects.py).

    .venv/bin/python benchmarks/bench_chunk_fidelity.py [--trees libstdc++ fmt tests] [--modes basic compilable]
        [--runs 9] [--reference REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from nanodata.pipeline.chunking.braces import balanced
from nanodata.pipeline.chunking.fidelity import lines_kept, source_lines

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests" / "pipeline" / "chunking"
FMT = Path(importlib.util.find_spec("torch").submodule_search_locations[0]) / "include" / "fmt"
TREES = ("libstdc++", "fmt", "tests")
MODES = ("basic", "compilable")
MAX_TOKENS = 2048
# The reference: the last chunker that laid files out line by line, before the syntax-tree layout (comparing
# against main would compare the chunker with itself).
REFERENCE = "b6cbf20"

# Runs in a child: chunks a tree with the checkout given first on sys.path, once per line read from stdin,
# and prints the CPU seconds of each run.
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from nanodata.pipeline.chunkbuild import chunk_to_jsonl
root, mode, out, max_tokens = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
import nanodata
assert nanodata.__file__.startswith(sys.argv[1]), nanodata.__file__
chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=max_tokens, workers=1)  # warm: tables, page cache
print("ready", flush=True)
for _ in sys.stdin:
    started = time.process_time()
    chunk_to_jsonl(out, project_dirs=[root], mode=mode, max_tokens=max_tokens, workers=1)
    print(json.dumps(time.process_time() - started), flush=True)
"""


def write_trees(root: Path) -> dict[str, Path]:
    """Each tree as ROOT/NAME/PROJECT/files, so a doc's source is PROJECT/relative path."""
    sys.path.insert(0, str(TESTS))
    from cpp_projects import STD_HEADERS, STD_SUBSET, write_layers

    trees = {name: root / name for name in TREES}
    (trees["libstdc++"] / "libstdcxx").mkdir(parents=True)
    for name in STD_SUBSET:
        shutil.copy(STD_HEADERS / name, trees["libstdc++"] / "libstdcxx" / name)
    shutil.copytree(FMT, trees["fmt"] / "fmt")
    shutil.copytree(TESTS / "fidelity_cases", trees["tests"] / "fidelity_cases")
    write_layers(trees["tests"])
    return trees


class Child:
    """One checkout chunking one tree, run after run on request."""

    def __init__(self, checkout: Path, tree: Path, mode: str, out: Path):
        self.out = out
        self.process = subprocess.Popen([sys.executable, "-c", CHILD, str(checkout), str(tree), mode, str(out),
                                         str(MAX_TOKENS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.seconds: list[float] = []
        self._read()

    def _read(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"chunk_fidelity: the child chunking {self.out.stem} exited ({self.process.wait()})")
        return line

    def run(self) -> None:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        self.seconds.append(json.loads(self._read()))

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def fidelity(tree: Path, out: Path, seconds: float) -> dict:
    """Lines kept, balanced docs and speed of one checkout's output of a tree."""
    docs_by_source = defaultdict(list)
    with open(out, encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            docs_by_source[doc["source"]].append(doc["text"])
    files = [p for p in sorted(tree.rglob("*")) if p.is_file()]
    lines = kept = 0
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines += len(source_lines(text))
        kept += lines_kept(text, docs_by_source[str(path.relative_to(tree))])
    docs = [t for texts in docs_by_source.values() for t in texts]
    megabytes = sum(p.stat().st_size for p in files) / 1e6
    return {"docs": len(docs), "kept": 100 * kept / lines, "balanced": 100 * sum(map(balanced, docs)) / len(docs),
            "docs_s": len(docs) / seconds, "mb_s": megabytes / seconds}


def measure(checkouts: dict[str, Path], tree: Path, mode: str, tmp: Path, runs: int) -> tuple[dict, dict, float]:
    """Both checkouts on one tree, runs taken in turns (ABBA): (this, ref, median of this/ref speed ratios)."""
    children = {label: Child(checkout, tree, mode, tmp / f"{label}.jsonl") for label, checkout in checkouts.items()}
    try:
        for r in range(runs):
            for label in ("this", "ref") if r % 2 == 0 else ("ref", "this"):
                children[label].run()
    finally:
        for child in children.values():
            child.close()
    this, ref = (children[label] for label in ("this", "ref"))
    paired = statistics.median(r / t for t, r in zip(this.seconds, ref.seconds, strict=True))
    return fidelity(tree, this.out, min(this.seconds)), fidelity(tree, ref.out, min(ref.seconds)), paired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", choices=TREES, default=TREES)
    parser.add_argument("--modes", nargs="+", default=MODES)
    parser.add_argument("--runs", type=int, default=9, help="timed runs of each checkout, taken in turns")
    parser.add_argument("--reference", default=REFERENCE, help=f"git revision to compare with (default {REFERENCE}: "
                        "the line-by-line chunker)")
    args = parser.parse_args([] if __name__ != "__main__" else None)
    with tempfile.TemporaryDirectory(prefix="nanodata-fidelity-") as tmp:
        tmp = Path(tmp)
        ref_checkout = tmp / "ref"
        ref_checkout.mkdir()
        found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", f"{args.reference}^{{commit}}"],
                               capture_output=True, text=True)
        if found.returncode:  # a shallow clone or a tarball has no history to compare with
            print(f"chunk_fidelity: skipped: --reference {args.reference} is not a commit of {REPO} (a shallow "
                  f"clone? `git fetch --unshallow`, or name another revision)")
            return
        commit = found.stdout.strip()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "nanodata"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(ref_checkout)], input=archive, check=True)
        trees = write_trees(tmp / "trees")
        print(f"--max-tokens {MAX_TOKENS}, 1 worker, {args.runs} runs each in turns (CPU s; docs/s, MB/s of the best); this = {REPO}, "
              f"ref = git archive {commit} ({args.reference})")
        print(f"{'tree':<10} {'mode':<10} {'':<5} {'docs':>5} {'lines kept %':>12} {'balanced %':>10} "
              f"{'docs/s':>8} {'MB/s':>6}")
        for name in args.trees:
            for mode in args.modes:
                this, ref, paired = measure({"this": REPO, "ref": ref_checkout}, trees[name], mode, tmp, args.runs)
                for label, row in (("this", this), ("ref", ref)):
                    print(f"{name:<10} {mode:<10} {label:<5} {row['docs']:>5} {row['kept']:>12.2f} "
                          f"{row['balanced']:>10.1f} {row['docs_s']:>8.1f} {row['mb_s']:>6.3f}")
                print(f"{name:<10} {mode:<10} {'ratio':<5} {'':>5} {'':>12} {'':>10} "
                      f"{this['docs_s'] / ref['docs_s']:>8.2f} {this['mb_s'] / ref['mb_s']:>6.2f}  "
                      f"paired median {paired:.2f} (goal >= 0.85)")


if __name__ == "__main__":
    main()
