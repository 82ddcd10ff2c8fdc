"""Peak RSS of `nanodata to-parquet` on 20,000 docs of ~2 KB and of ~60 KB (memory bounded by bytes).

Each run is the real CLI in a child process (`python -m nanodata.cli to-parquet`, default rows per file
50,000, so all 20,000 docs fall in one shard as a user's first run would have them); peak RSS is the
child's VmHWM (whole process, interpreter and libraries included). Goal: ≤ 1 GB at ~60 KB per doc and
≤ 1.5x the ~2 KB figure. NANODATA_SRC=DIR runs another checkout's package (e.g. the code before the
change, `git archive 8a8e074 nanodata | tar -x -C DIR`), for the before/after figures.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

DOCS = 20_000
SIZES_KB = (2, 60)
GOAL_MB, GOAL_RATIO = 1024, 1.5

CHILD = textwrap.dedent("""
    import runpy, sys
    def peak_mb():
        line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    sys.argv = ["nanodata", "to-parquet", "--input", sys.argv[1], "--out", sys.argv[2]]
    try:
        runpy.run_module("nanodata.cli", run_name="__main__")
    except SystemExit as exit:
        if exit.code:
            raise
    finally:
        print("PEAK", peak_mb())
""")


def write_docs(path: Path, n: int, kb: int, seed: int = 0) -> None:
    """Chunker-like docs of about `kb` KB: lines drawn from a pool of C++-ish lines."""
    rng = random.Random(seed)
    words = ("int auto const return if else for while std::vector<int> size_t template typename class struct "
             "namespace void bool nullptr static_cast<double> operator<< {} () ; = == != += -> ::").split()
    pool = ["    " * rng.randint(0, 3) + " ".join(rng.choices(words, k=rng.randint(2, 14))) for _ in range(4000)]
    per_line = sum(map(len, pool)) / len(pool) + 1
    with open(path, "w") as f:
        for i in range(n):
            text = "\n".join(rng.choices(pool, k=max(1, int(kb * 1000 / per_line * rng.uniform(0.8, 1.2)))))
            f.write(json.dumps({"text": text, "n_tokens": len(text) // 4, "mode": "basic",
                                "source": f"proj/file_{i}.cpp", "kind": "file"}) + "\n")


def peak_rss_mb(src: Path, out: Path) -> float:
    env = dict(os.environ, TQDM_DISABLE="1")
    if os.environ.get("NANODATA_SRC"):
        env["PYTHONPATH"] = os.environ["NANODATA_SRC"]
    # cwd away from the repo: `python -c` puts the cwd first on sys.path, ahead of NANODATA_SRC
    done = subprocess.run([sys.executable, "-c", CHILD, str(src), str(out)], capture_output=True, text=True,
                          check=True, env=env, cwd=src.parent)
    return float(done.stdout.split("PEAK")[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        peaks = {}
        for kb in SIZES_KB:
            src = Path(tmp) / f"docs-{kb}kb.jsonl"
            write_docs(src, DOCS, kb)
            peaks[kb] = peak_rss_mb(src, Path(tmp) / f"out-{kb}kb")
            print(f"to-parquet peak RSS, {DOCS:,} docs of ~{kb} KB ({src.stat().st_size / 1e6:.0f} MB): "
                  f"{peaks[kb]:.0f} MB", flush=True)
            src.unlink()
        small, big = peaks[SIZES_KB[0]], peaks[SIZES_KB[1]]
        print(f"to-parquet peak RSS at ~60 KB vs ~2 KB docs: measured {big:.0f} MB / {small:.0f} MB = "
              f"{big / small:.2f}x | goal <= {GOAL_MB} MB and <= {GOAL_RATIO}x | before (the whole shard held in memory): "
              f"3,794 MB / 236 MB = 16.1x")


if __name__ == "__main__":
    main()
