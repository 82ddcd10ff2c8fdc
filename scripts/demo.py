"""`make demo`: the main job end to end on this machine, through Airflow, in a few minutes.

1. a C++ source: projects copied from the compiler's standard library headers (a bounded subset),
   or a generated sample where there are none;
2. a local GCS emulator (a real gcp-storage-emulator process on loopback) with bucket nanodata-demo;
3. the nanodata_cpp_corpus DAG run by Airflow (`dag.test()`, SQLite metadata DB) with the emulator bucket
   as destination: chunk → merge → parquet → upload → Asset event → report;
4. the build synced down and streamed with the best-fit loader; a summary is printed, then what to do next
   (open the report; start the Airflow UI with the README's commands, which serve this demo's bucket).
Everything lands in ./demo_out/ (removed and rebuilt on each run).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import airflow_local

OUT = airflow_local.REPO / "demo_out"
BUCKET = "nanodata-demo"
DEST = f"gs://{BUCKET}/cpp"
# Standard-library sub-trees, each a project, and a byte budget per project that keeps the run short.
PROJECTS = {"bits": 4_500_000, "ext": 2_600_000, "tr1": 900_000, "debug": 600_000, "pstl": 600_000}
EXTENSIONS = (".h", ".hpp", ".tcc")
B, T, BATCHES = 8, 2048, 20


def cpp_include_dir() -> Path | None:
    versions = sorted((p for p in Path("/usr/include/c++").glob("*") if (p / "bits").is_dir()),
                      key=lambda p: [int(x) if x.isdigit() else 0 for x in p.name.split(".")])
    return versions[-1] if versions else None


def make_source(root: Path) -> str:
    """Copy up to PROJECTS[name] bytes of headers (smallest files first) of each project; returns a description."""
    include = cpp_include_dir()
    if include is None:
        return generate_sample(root)
    for name, budget in PROJECTS.items():
        files = sorted((p for p in (include / name).rglob("*") if p.suffix in EXTENSIONS and p.is_file()),
                       key=lambda p: (p.stat().st_size, str(p)))
        used = 0
        for path in files:
            if used + path.stat().st_size > budget:
                break
            target = root / name / path.relative_to(include / name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            used += path.stat().st_size
    n = sum(1 for p in root.rglob("*") if p.is_file())
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return f"{n} headers ({size / 1e6:.1f} MB) from {include}/{{{','.join(PROJECTS)}}}"


def generate_sample(root: Path) -> str:
    """No C++ standard library here: a deterministic generated project instead."""
    for p in range(4):
        project = root / f"sample{p}"
        project.mkdir(parents=True)
        for f in range(25):
            funcs = "\n".join(f"int f{p}_{f}_{i}(int x) {{\n    return f{p}_{f}_{i - 1}(x) * {i + 3} + {f};\n}}\n"
                              if i else f"int f{p}_{f}_0(int x) {{ return x + {p}; }}\n" for i in range(40))
            (project / f"unit{f}.cpp").write_text(f"// generated unit {p}.{f}\n#include <cstdint>\n\n{funcs}")
    return "a generated sample (no /usr/include/c++ on this machine): 100 files"


def run_dag(source: Path) -> tuple[object, float]:
    import airflow  # noqa: F401  (its import sets the warning filters, so ours go after it)

    warnings.simplefilter("ignore", DeprecationWarning)  # Airflow-internal notices, nothing to act on
    # dag.test()'s own loop says "No tasks to run" whenever it polls between a mapped task and its expansion: a
    # notice about its polling, not the run (a failed task still prints, and so does the run's state)
    logging.getLogger("airflow.sdk.definitions.dag").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    airflow_local.init_db()
    dag = airflow_local.load_dag("nanodata_cpp_corpus")
    conf = {"source": str(source), "destination": DEST, "mode": "basic", "max_tokens": 2048,
            "tokenizer": "cl100k_base", "rows_per_file": 1000, "val_fraction": 0.02}
    start = time.perf_counter()
    dag_run = dag.test(run_conf=conf)
    return dag_run, time.perf_counter() - start


def stream(data_dir: Path) -> tuple[int, float]:
    from nanodata.loader import tokenizing_distributed_data_loader_bos_bestfit
    from nanodata.tokenizer import load

    loader = tokenizing_distributed_data_loader_bos_bestfit(load("cl100k_base"), B, T, "train", device="cpu",
                                                            data_dir=str(data_dir))
    start, tokens = time.perf_counter(), 0
    for _, (inputs, targets) in zip(range(BATCHES), loader, strict=False):
        assert inputs.shape == (B, T) and targets.shape == (B, T)
        tokens += inputs.numel()
    return tokens, tokens / (time.perf_counter() - start)


def main() -> int:
    started = time.perf_counter()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    airflow_local.configure(OUT / "airflow")
    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"  # the task logs stay in demo_out/airflow
    described = make_source(OUT / "source")
    print(f"[1/4] source: {described}")

    from nanodata import corpus, storage
    from nanodata.testing.emulator import GcsEmulator

    with GcsEmulator(root=OUT / "gcs") as emulator:
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.host
        emulator.create_bucket(BUCKET)
        print(f"[2/4] GCS emulator at {emulator.host}, bucket gs://{BUCKET}")

        dag_run, seconds = run_dag(OUT / "source")
        print(f"[3/4] Airflow run {dag_run.run_id} of nanodata_cpp_corpus: {dag_run.state} in {seconds:.0f} s")
        if dag_run.state != "success":
            print(f"demo failed: see the task logs under {OUT / 'airflow' / 'logs'}", file=sys.stderr)
            return 1
        latest = json.loads(storage.read_bytes(f"{DEST}/latest.json"))
        local = OUT / "corpus"
        corpus.sync(latest["uri"], str(local))

    tokens, rate = stream(local)
    report = json.loads((local / "report" / "report.json").read_text())
    crop = report["crop_fraction"]
    index = local / "report" / "index.html"
    print(f"[4/4] streamed {BATCHES} batches of {B}x{T} with the best-fit loader\n")
    print(f"build      {latest['uri']}  (key {latest['key']})")
    print(f"docs       {latest['docs']:,} ({latest['duplicates_dropped']:,} exact duplicates dropped; "
          f"{latest['near_files_removed']:,} near-duplicate files removed, {latest['near_docs_removed']:,} docs)")
    print(f"tokens     {latest['tokens']:,}")
    reuse = latest["reuse"]
    print(f"reuse      {reuse['files_reused']:,} files reused, {reuse['files_chunked']:,} chunked "
          f"({reuse['bytes_chunked'] / 1e6:.1f} MB); a rebuild after a change chunks only what changed "
          f"(cache: {DEST}/.cache/)")
    print(f"shards     {shards_line(local)}, {latest['bytes'] / 1e6:.2f} MB; manifest.json + _COMPLETE")
    print("crop       " + ", ".join(f"T={t}: {100 * v:.1f}%" for t, v in crop.items()) + " of tokens cropped "
          "(why docs of at most max_tokens are cropped at all: see the report)")
    print(f"loader     {rate:,.0f} tokens/s ({tokens:,} tokens, CPU)")
    print(f"report     {index} (also {latest['uri']}/report/ in the bucket)")
    print(f"total      {time.perf_counter() - started:.0f} s; everything is under {OUT}/\n")
    print("next       open the report in a browser: file://" + str(index))
    print("           the Airflow UI: run the commands under README.md's \"The web UI locally\" (Airflow DAGs) from")
    print(f"           {airflow_local.REPO}; its GCS emulator serves {OUT / 'gcs'}, so Browse > Corpus reports")
    print("           lists this build, and the trigger form runs nanodata_cpp_corpus again")
    return 0


def shards_line(build: Path) -> str:
    """The shard count as the manifest has it (train shards listed apart from the val shard)."""
    from nanodata.dataset import read_manifest

    manifest = read_manifest(build)
    val = manifest.val
    return f"{len(manifest.shards)} train + {1 if val else 0} val ({val.name if val else 'none'})"


if __name__ == "__main__":
    sys.exit(main())
