"""Peak memory of C++ chunking as the input grows: the CLI (basic over JSONL, compilable over a project
tree) at two corpus sizes 4x apart, and the DAG's tasks (nanodata.jobs.cpp_corpus) one process each.

Goals: peak RSS large / small <= 1.25 (memory must not grow with the input) and <= 1.5 GB absolute per
task. The same runs give the input MB/s and files/s (the chunker's own figures, from OUTPUT.done).

How memory is read (VmHWM, as the project does; ru_maxrss would carry the launching process's peak
across exec): every measurement is a fresh child process, watched from here every 20 ms until it
exits; the child also reports its own VmHWM at its end (exact). `--workers 2` makes pool processes
below it (forked, one pool per pass), which die before the child does, so only the watcher sees them.
The figure held against the goals is the peak over time of the SUM of VmHWM over the processes of the
tree alive at that moment: a worker's memory is in addition to its parent's, so a max would
understate what the machine must hold; VmHWM never decreases, so the sum never under-reports. It
over-reports: forked workers share the parent's pages (tokenizer tables, interpreter) copy-on-write
and VmHWM counts them in each. So the sampled peak (every 100 ms) of the summed Pss (each shared page
divided among its sharers: the tree's own resident memory, close to what a cgroup / pod limit charges)
is printed next to it, and the largest single process. A DAG task is one process (mapped tasks run
with one worker): its own VmHWM, exact.

Corpora (chunk_bench_common): JSONL records of the headers under /usr/include (libstdc++, glibc, LLVM,
V8/node, Linux UAPI ...), shuffled, cycled with per-copy marks so dedupe keeps copies; project trees
of distinct headers. Sizes are cut to keep the run to a few minutes on 2 cores; the DAG tasks run at
partition_mb = DAG_PARTITION_MB (the default is 256 MB, but at ~2 MB/s per core one basic and one
compilable chain of that size take 2-4 min alone; per (a)/(b) memory is flat in the input once the
caches are full): chunk_batch
of partition 0 of the large JSONL, and plan, parse_batch, index, chunk_batch over a ~48 MB tree; the
basic and the compilable chains run side by side (one core each).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from chunk_bench_common import (
    CHILD_PRELUDE,
    params_for,
    step_argv,
    watch,
    write_jsonl,
    write_tree,
)

JSONL_MB = (24, 96)            # basic over JSONL: small, large (4x)
# compilable over a project tree: small, large (4x). Below ~2,000 files (~30 MB) memory still rises
# while SQLite's page caches (64 MiB per connection) and the index lookup caches fill; from there it
# is flat (measured: 600 files 323 MB, 1,200 368, 2,400 487, 4,800 481, 7,600 504), so the small
# corpus starts there. 7,600 is about every usable header of this machine.
TREE_FILES = (1900, 7600)
WORKERS = 2
DAG_PARTITION_MB = 48
DAG_TREE_FILES = 3400          # ~48 MB: one partition of DAG_PARTITION_MB (and a sliver)
RATIO_GOAL = 1.25
ABSOLUTE_GOAL_MB = 1536
RUST_FILES_PER_S_PER_CORE = 25.5   # published compilable 16K: 1,225 files/s on 48 cores
PYTHON_FILES_PER_S = 1000          # published Python chunker, one machine

CLI_CHILD = CHILD_PRELUDE + """
from nanodata.cli import main
rc = main(sys.argv[1:])
_report(json.load(open(sys.argv[sys.argv.index("--output") + 1] + ".done")))
"""


def run_cli(args: list[str], output: Path) -> dict:
    return watch([sys.executable, "-c", CLI_CHILD, "chunk", *args, "--workers", str(WORKERS), "--output", str(output),
                  "--no-progress"])


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def report_case(name: str, small: dict, large: dict, small_what: str, large_what: str, reference) -> None:
    """reference(result) -> the text after the throughput figures."""
    small_mb, large_mb = small["tree_peak_mb"], large["tree_peak_mb"]
    print(f"{name} peak RSS (sum of VmHWM over the process tree): small {small_mb:.0f} MB ({small_what}) | "
          f"large {large_mb:.0f} MB ({large_what})")
    print(f"{name} peak RSS large/small: measured {large_mb:.0f} MB | reference {small_mb:.0f} MB (4x smaller input) | "
          f"ratio {large_mb / small_mb:.2f} (goal <= {RATIO_GOAL})")
    print(f"{name} peak RSS absolute: measured {large_mb:.0f} MB | reference {ABSOLUTE_GOAL_MB} MB (goal per task) | "
          f"ratio {large_mb / ABSOLUTE_GOAL_MB:.2f} (goal <= 1.0)")
    for label, m in (("small", small), ("large", large)):
        print(f"  {label}: parent {m['root_mb']:.0f} MB, {m['workers']} worker processes seen, largest "
              f"{m['worker_peak_mb']:.0f} MB; summed Pss peak (shared pages once, sampled) {m['pss_peak_mb']:.0f} MB")
    for label, m in (("small", small), ("large", large)):
        r = m["result"]
        mb, cpu = r["bytes_read"] / 1e6, m["cpu_s"]
        print(f"{name} throughput {label}: {r['mb_per_s']:.2f} MB/s, {r['files_per_s']:.0f} files/s wall "
              f"({r['files_per_s'] / WORKERS:.0f} files/s per worker); per CPU-second {mb / cpu:.2f} MB, "
              f"{r['files_read'] / cpu:.0f} files | {r['files_read']} files, {mb:.1f} MB -> {r['docs']} docs "
              f"({r['duplicates_dropped']} duplicates dropped) in {r['seconds']:.1f} s | {reference(r)}")


def dag_chain(name: str, source: Path, dest: Path, mode: str, out: dict) -> None:
    """plan, then (global modes) every parse_batch, index, then chunk_batch of partition 0: each a child."""
    try:
        params = params_for(mode)
        plan = watch(step_argv("plan", {"source": str(source), "dest": str(dest), "partition_mb": DAG_PARTITION_MB},
                               params))
        planned = plan["result"]
        steps = [("plan", plan)]
        for i, ref in enumerate(planned["parse"]):
            m = watch(step_argv("parse_batch", ref, params))
            if i == 0:
                steps.append(("parse_batch", m))
        if planned["parse"]:
            steps.append(("index", watch(step_argv("index", planned, params))))
        steps.append(("chunk_batch", watch(step_argv("chunk_batch", planned["chunk"][0], params))))
        out[name] = (planned, steps)
    except Exception as exc:  # noqa: BLE001 - reported by the caller, after the other chain
        out[name] = exc


def report_dag(name: str, planned: dict, steps: list) -> None:
    import json

    stage = planned["stage"]
    n = len(planned["chunk"])
    for step, m in steps:
        what, rate = f"{n} partitions", ""
        if step in ("parse_batch", "chunk_batch"):
            summary = json.loads(Path(stage, "units" if step == "parse_batch" else "docs", "00000.json").read_text())
            what = f"partition 0 of {n}: {summary['bytes_read'] / 1e6:.1f} MB, {summary['files_read']} files"
            rate = (f" | {summary['mb_per_s']:.2f} MB/s, {summary['files_read'] / summary['seconds']:.0f} files/s "
                    f"on one core (task CPU {m['cpu_s']:.0f} s)")
        print(f"DAG task {name} {step} (partition_mb {DAG_PARTITION_MB}; {what}): peak RSS measured "
              f"{m['root_mb']:.0f} MB | reference {ABSOLUTE_GOAL_MB} MB (goal per task) | ratio "
              f"{m['root_mb'] / ABSOLUTE_GOAL_MB:.2f} (goal <= 1.0) | {m['seconds']:.1f} s{rate}")


def main() -> None:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-chunk-memory-") as tmp:
        tmp = Path(tmp)
        jsonl = []
        for size in JSONL_MB:
            (tmp / f"jsonl{size}").mkdir()
            path = tmp / f"jsonl{size}" / f"cpp{size}.jsonl"
            records, _ = write_jsonl(path, size)
            jsonl.append((path, records))
        trees = []
        for n in TREE_FILES:
            files, total = write_tree(tmp / f"tree{n}", n)
            trees.append((tmp / f"tree{n}", files, total))
        write_tree(tmp / "dag-tree", DAG_TREE_FILES)
        print(f"corpora: JSONL {' / '.join(f'{_mb(p):.1f} MB ({n} records)' for p, n in jsonl)}; project trees "
              f"{' / '.join(f'{n} files ({b / 1e6:.1f} MB)' for _, n, b in trees)}; from /usr/include; "
              f"{os.cpu_count()} cores, --workers {WORKERS}, --max-tokens 2048")

        failed = []  # a case that fails is reported and the others still run; main() raises at the end

        def case(name, run):
            try:
                run()
            except Exception as exc:  # noqa: BLE001 - one failing case must not hide the others' figures
                print(f"{name}: FAILED: {type(exc).__name__}: {str(exc)[-1500:]}", flush=True)
                failed.append(name)

        def basic_case():
            basic = [run_cli(["--inputs", str(p), "--mode", "basic"], tmp / f"basic{i}.jsonl")
                     for i, (p, _) in enumerate(jsonl)]
            report_case("chunk CLI basic (JSONL)", *basic, f"{_mb(jsonl[0][0]):.0f} MB JSONL",
                        f"{_mb(jsonl[1][0]):.0f} MB JSONL",
                        lambda r: f"reference: published Python chunker ~{PYTHON_FILES_PER_S} files/s on one machine")

        def compilable_case():
            compilable = [run_cli(["--project-dirs", str(root), "--mode", "compilable"], tmp / f"compilable{i}.jsonl")
                          for i, (root, _, _) in enumerate(trees)]
            report_case("chunk CLI compilable (tree)", *compilable, f"{trees[0][1]} files", f"{trees[1][1]} files",
                        lambda r: f"reference: published Rust chunker {RUST_FILES_PER_S_PER_CORE} files/s per core, "
                                  f"ratio per worker {r['files_per_s'] / WORKERS / RUST_FILES_PER_S_PER_CORE:.2f}")

        case("chunk CLI basic (JSONL)", basic_case)
        case("chunk CLI compilable (tree)", compilable_case)

        # (c) DAG tasks (the large JSONL; a tree of ~one partition), two chains side by side, one process a task
        out: dict = {}
        chains = [threading.Thread(target=dag_chain, args=("basic", jsonl[1][0], tmp / "dag-basic", "basic", out)),
                  threading.Thread(target=dag_chain, args=("compilable", tmp / "dag-tree", tmp / "dag-compilable",
                                                           "compilable", out))]
        for t in chains:
            t.start()
        for t in chains:
            t.join()
        for name in ("basic", "compilable"):
            if isinstance(out[name], Exception):
                exc = out[name]
                print(f"DAG tasks {name}: FAILED: {type(exc).__name__}: {str(exc)[-1500:]}", flush=True)
                failed.append(f"DAG tasks {name}")
            else:
                report_dag(name, *out[name])
    print(f"(bench_chunk_memory ran {time.perf_counter() - started:.0f} s; load average now "
          f"{os.getloadavg()[0]:.2f}: other jobs on these {os.cpu_count()} cores slow the throughput figures)")
    if failed:
        raise RuntimeError(f"failed cases: {', '.join(failed)}")


if __name__ == "__main__":
    main()
