"""Nightly rebuilds that cost what changed: a full build, a night's changes, the rebuild that reuses each
unchanged file's work, and a build of the changed input into an empty destination, side by side.

Source (real C++): /usr/include as 30 project trees (its 29 largest top-level folders, one project each, the rest
one more project) plus a `.jsonl.gz` of libstdc++'s headers as records of 10 repos, each copy made unique by a first
comment line, until SIZE_MB MB in all. The night's changes: 1% of the files edited (one line each), 0.1% added
(copies of other files under new names) and 0.1% deleted; spread over every project and the JSONL in basic mode, and
kept to 5 of the 30 projects in compilable mode (every 6th project by name). Each build runs the DAG's steps in this
process (plan, parse, index, chunk, near, route, bucket, shard, publish, report, cleanup) into a local destination;
task time = the steps' summed seconds on 1 core. Printed per mode: both task times and their ratio (goal: <= 10% in
basic, <= 25% in compilable), the reuse counts, the bytes chunked again against the input (basic: <= 3%) or against
the changed projects and the projects that include them (compilable), and the corpus digests of the rebuild and the
fresh build (they must be equal). NANODATA_BENCH_INCREMENTAL_MB=N sets the size (default 160); NANODATA_BENCH_
INCREMENTAL_JSONL=PATH rebuilds a given .jsonl.gz instead (e.g. bench_dag_tail.py's), basic mode only.

Then reuse from a bucket far away: a partition of 10,000 real C++ files (NANODATA_BENCH_INCREMENTAL_GCS_FILES) whose
entries are all in a gs:// cache on the real GCS emulator, 30 ms added to every request by a proxy; the wall of the
chunk task's work on it with the entries fetched ahead (goal: < 10 s) beside the same work looking each entry up on
its file's turn, one GET after another (measured on the first 1,000 files, NANODATA_BENCH_INCREMENTAL_SEQUENTIAL_
FILES, and scaled to the partition), and their ratio; with the CPU seconds of this process.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

SIZE_MB = int(os.environ.get("NANODATA_BENCH_INCREMENTAL_MB", "160"))
GIVEN_JSONL = os.environ.get("NANODATA_BENCH_INCREMENTAL_JSONL")
PROJECTS = 30
EDITED, ADDED, DELETED = 0.01, 0.001, 0.001
GOALS = {"basic": (0.10, 0.03), "compilable": (0.25, None)}  # task time ratio, bytes chunked / input
PARAMS = {"max_tokens": 2048, "tokenizer": "cl100k_base", "max_file_bytes": None, "rows_per_file": 50_000,
          "val_fraction": 0.01, "dedup": "near", "near_threshold": 0.7, "filters": "generated,long-lines,alpha,encoded",
          "redact": "secrets,emails,ips", "decontaminate": None, "licenses": None}
CPP = (".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".ipp", ".tcc")
GCS_FILES = int(os.environ.get("NANODATA_BENCH_INCREMENTAL_GCS_FILES", "10000"))
SEQUENTIAL_FILES = int(os.environ.get("NANODATA_BENCH_INCREMENTAL_SEQUENTIAL_FILES", "1000"))
GCS_LATENCY, GCS_GOAL = 0.030, 10.0  # seconds added to every request; the partition's reuse, wall seconds


def make_source(root: Path, size_mb: int) -> None:
    """30 project trees from /usr/include, then a .jsonl.gz of libstdc++ headers up to size_mb MB in all."""
    include = Path("/usr/include")
    folders = sorted((p for p in include.iterdir() if p.is_dir() and not p.is_symlink()),
                     key=lambda p: (-sum(f.stat().st_size for f in p.rglob("*") if f.is_file()), p.name))
    for rank, folder in enumerate(folders):
        project = folder.name if rank < PROJECTS - 1 else "misc"
        target = root / "trees" / project / (folder.name if project == "misc" else "")
        shutil.copytree(folder, target, symlinks=True, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if Path(d, n).is_symlink()])
    for loose in include.iterdir():  # loose headers (sqlite3.h, elf.h, ...) join misc
        if loose.is_file() and loose.suffix in CPP:
            shutil.copy(loose, root / "trees" / "misc" / loose.name)
    written = sum(f.stat().st_size for f in (root / "trees").rglob("*") if f.is_file() and f.suffix in CPP)
    std = sorted(p for p in (include / "c++").rglob("*") if p.is_file() and p.stat().st_size < 400_000)
    texts = [(str(p.relative_to(include)), p.read_text(errors="replace")) for p in std]
    copy = 0
    with gzip.open(root / "trees" / "crawl.jsonl.gz", "wt", compresslevel=1) as f:
        while written < size_mb * 1_000_000:
            for rel, text in texts:
                text = f"// crawled copy {copy}\n{text}"
                f.write(json.dumps({"text": text, "path": rel, "repo": f"crawl{copy % 10}"}) + "\n")
                written += len(text.encode())
                if written >= size_mb * 1_000_000:
                    break
            copy += 1


def night(root: Path, projects: list[str] | None, seed: int = 0) -> dict:
    """Edit EDITED of the files (one line each), add ADDED, delete DELETED, in `projects` (None: every project and
    the JSONL). Returns what changed."""
    rng = random.Random(seed)
    trees = root / "trees"
    files = sorted(p for p in trees.rglob("*") if p.is_file() and p.suffix in CPP and not p.is_symlink()
                   and (projects is None or p.relative_to(trees).parts[0] in projects))
    jsonl = trees / "crawl.jsonl.gz"
    records = gzip.decompress(jsonl.read_bytes()).decode().splitlines(keepends=True) if jsonl.exists() else []
    slots = [("file", p) for p in files] + ([("record", i) for i in range(len(records))] if projects is None else [])
    total = len(slots)
    picked = rng.sample(slots, int(total * (EDITED + ADDED + DELETED)))
    n_edit, n_add = int(total * EDITED), int(total * ADDED)
    if projects is not None:  # each named project gets its edits: 1% of its files, at least one
        by_project = {name: [s for s in slots if s[1].relative_to(trees).parts[0] == name] for name in projects}
        edits = [slot for name in projects for slot in rng.sample(by_project[name], max(1, int(len(by_project[name])
                                                                                                * EDITED)))]
        rest = [slot for slot in picked if slot not in set(edits)][:int(total * (ADDED + DELETED))]
        picked, n_edit = edits + rest, len(edits)
    changed = {"edited": 0, "added": 0, "deleted": 0, "projects": set()}
    dropped_records = set()
    for k, (kind, where) in enumerate(picked):
        action = "edited" if k < n_edit else "added" if k < n_edit + n_add else "deleted"
        changed[action] += 1
        if kind == "file":
            changed["projects"].add(where.relative_to(trees).parts[0])
            text = where.read_text(errors="surrogateescape")
            if action == "edited":
                where.write_text(f"// nightly edit {k}\n" + text, errors="surrogateescape")
            elif action == "added":
                where.with_name(f"added_{k}_{where.name}").write_text(f"// added {k}\n" + text, errors="surrogateescape")
            else:
                where.unlink()
        else:
            record = json.loads(records[where])
            changed["projects"].add(record["repo"])
            if action == "edited":
                record["text"] = f"// nightly edit {k}\n" + record["text"]
                records[where] = json.dumps(record) + "\n"
            elif action == "added":
                record["text"] = f"// added {k}\n" + record["text"]
                records[where] += json.dumps(record) + "\n"
            else:
                dropped_records.add(where)
    if records:
        with gzip.open(jsonl, "wt", compresslevel=1) as f:
            f.writelines(r for i, r in enumerate(records) if i not in dropped_records)
    changed["projects"] = sorted(changed["projects"])
    return changed


def build(source: str, dest: str, mode: str, partition_mb: float = 10) -> dict:
    """Every step of the DAG in order, as its tasks call them; their seconds, the reuse counts, the corpus digest."""
    from nanodata.jobs import cpp_corpus
    from nanodata.ranges import SHARD_MB
    from nanodata.report import build_stats
    from nanodata.report.corpus_report import report_build

    params = {**PARAMS, "mode": mode}
    seconds: dict[str, float] = {}

    def timed(step, fn, *args, **kw):
        started = time.perf_counter()
        out = fn(*args, **kw)
        seconds[step] = seconds.get(step, 0.0) + time.perf_counter() - started
        return out

    chunk_kw = {k: v for k, v in params.items() if k in cpp_corpus.SETTING_NAMES}
    planned = timed("plan", cpp_corpus.plan, source, dest, params, partition_mb=partition_mb)
    for ref in planned["parse"]:
        timed("parse", cpp_corpus.parse_batch, ref, **chunk_kw)
    for ref in timed("index", cpp_corpus.index, planned):
        timed("chunk", cpp_corpus.chunk_batch, ref, **chunk_kw)
    for ref in planned["near"]:
        timed("near", cpp_corpus.near_batch, ref)
    refs = timed("route", cpp_corpus.route, planned["stage"], planned["key"], rows_per_file=params["rows_per_file"],
                 shard_mb=params.get("shard_mb", SHARD_MB.default), val_fraction=params["val_fraction"])
    for ref in refs:
        timed("bucket", cpp_corpus.bucket_batch, ref)
    for ref in cpp_corpus.shard_refs(planned["stage"], planned["key"]):
        timed("shard", cpp_corpus.shard_batch, dest, ref, tokenizer=params["tokenizer"])
    timed("publish", cpp_corpus.publish, dest, planned["stage"], planned["key"])
    extras = build_stats.report_extras(planned["stage"])
    timed("report", report_build, cpp_corpus.build_uri(dest, planned["key"]), tokenizer=params["tokenizer"],
          max_tokens=params["max_tokens"], **extras)
    deps = _included_by(planned["stage"])
    timed("cleanup", cpp_corpus.cleanup, dest, planned["key"])
    corpus = Path(cpp_corpus.build_uri(dest, planned["key"]))
    digest = hashlib.sha256()
    for path in sorted(p for p in corpus.rglob("*") if p.is_file() and "report" not in p.parts):
        digest.update(path.relative_to(corpus).as_posix().encode() + b"\0" + path.read_bytes())
    return {"seconds": seconds, "total": sum(seconds.values()), "reuse": extras["reuse"], "digest": digest.hexdigest(),
            "key": planned["key"], "included_by": deps}


def _included_by(stage: str) -> dict[str, set[str]]:
    """Global modes: project -> the projects whose files include one of its headers (from the build's index)."""
    index = Path(stage) / "index" / "index.sqlite"
    if not index.is_file():
        return {}
    db = sqlite3.connect(index)
    out: dict[str, set[str]] = {}
    for project, dep in db.execute("SELECT DISTINCT f.project, d.project FROM deps d JOIN files f ON f.gid = d.gid"):
        out.setdefault(dep, set()).add(project)
    db.close()
    return out


def _closure(projects: list[str], included_by: dict[str, set[str]]) -> set[str]:
    seen, todo = set(projects), list(projects)
    while todo:
        for other in included_by.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def run_mode(work: Path, mode: str) -> bool:
    source = work / mode / "src"
    if GIVEN_JSONL:
        (source / "trees").mkdir(parents=True)
        shutil.copy(GIVEN_JSONL, source / "trees" / "crawl.jsonl.gz")
    else:
        make_source(source, SIZE_MB)
    src = str(source / "trees")
    crawl = source / "trees" / "crawl.jsonl.gz"
    input_bytes = sum(f.stat().st_size for f in Path(src).rglob("*") if f.is_file() and f.suffix in CPP) + (
        sum(len(json.loads(line)["text"].encode()) for line in gzip.open(crawl, "rt")) if crawl.exists() else 0)
    full = build(src, str(work / mode / "dest"), mode)
    names = sorted(p.name for p in Path(src).iterdir() if p.is_dir())
    changed = night(source, None if mode == "basic" else names[::6][:5])
    rebuilt = build(src, str(work / mode / "dest"), mode)
    fresh = build(src, str(work / mode / "fresh"), mode)
    reuse = rebuilt["reuse"]
    ratio = rebuilt["total"] / full["total"]
    goal_time, goal_bytes = GOALS.get(mode, (None, None))
    print(f"{mode}: input {input_bytes / 1e6:.1f} MB; night: {changed['edited']:,} files edited, {changed['added']:,} "
          f"added, {changed['deleted']:,} deleted in {len(changed['projects'])} projects")
    print(f"  task time: full build {full['total']:.1f} s | rebuild {rebuilt['total']:.1f} s | ratio {ratio:.3f} "
          f"(goal <= {goal_time}) | fresh build of the changed input {fresh['total']:.1f} s")
    print("  rebuild's steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in rebuilt["seconds"].items()))
    print(f"  reuse: {reuse['files_reused']:,} files reused ({reuse['bytes_reused'] / 1e6:.1f} MB), "
          f"{reuse['files_chunked']:,} chunked ({reuse['bytes_chunked'] / 1e6:.2f} MB), {reuse['entries_rebuilt']} "
          f"entries rebuilt; cache {reuse['cache']['entries']:,} entries, {reuse['cache']['bytes'] / 1e6:.1f} MB")
    ok = ratio <= goal_time if goal_time is not None else True
    if goal_bytes is not None:
        share = reuse["bytes_chunked"] / input_bytes
        print(f"  bytes chunked again: {100 * share:.2f}% of the input (goal <= {100 * goal_bytes:.0f}%)")
        ok = ok and share <= goal_bytes
    else:
        allowed = _closure(changed["projects"], rebuilt["included_by"])
        chunked = {p for p, c in reuse["by_project"].items() if c["files_chunked"]}
        allowed_bytes = sum(c["bytes_reused"] + c["bytes_chunked"] for p, c in reuse["by_project"].items()
                            if p in allowed)
        print(f"  projects re-emitted: {len(chunked)} ({', '.join(sorted(chunked))}); changed {len(changed['projects'])}"
              f" and the projects that include them: {len(allowed)}; bytes chunked {reuse['bytes_chunked'] / 1e6:.1f} "
              f"MB vs theirs {allowed_bytes / 1e6:.1f} MB (goal: no more)")
        ok = ok and chunked <= allowed and reuse["bytes_chunked"] <= allowed_bytes
    same = rebuilt["digest"] == fresh["digest"] and rebuilt["key"] == fresh["key"]
    print(f"  corpus digest: rebuild {rebuilt['digest'][:16]} | fresh build {fresh['digest'][:16]} | "
          f"{'byte-identical' if same else 'DIFFERENT'}")
    return ok and same


def headers_tree(root: Path, n: int) -> None:
    """n real C++ files: the headers under /usr/include below 16 KB, in turn, each made unique by a first line."""
    headers = sorted(p for p in Path("/usr/include").rglob("*") if p.is_file() and not p.is_symlink()
                     and p.suffix in CPP and p.stat().st_size < 16_384)
    for k in range(n):
        header = headers[k % len(headers)]
        target = root / f"{k // 1000:02d}" / f"{k}_{header.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"// copy {k}\n" + header.read_text(errors="replace"))


def chunk_pass(items: list, settings: dict, workers: int = 1) -> tuple[float, dict]:
    """Seconds of a chunk task's work on one partition (its files through the cache, their docs staged), and its
    reuse counts with this process's CPU seconds (`cpu`)."""
    from nanodata.pipeline.chunkbuild.pipeline import Tally, chunk_items, stage_docs
    from nanodata.pipeline.chunkbuild.reuse import totals

    tally = Tally()
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="nanodata-bench-stage-") as tmp:
        stage_docs(chunk_items(items, settings, workers, tally), Path(tmp) / "docs.staged")
    return time.perf_counter() - started, {**totals(tally.reuse.to_dict()), "cpu": time.process_time() - cpu}


def gcs_reuse(work: Path) -> bool:
    """A GCS_FILES-file partition whose every file's entry is in a gs:// cache (the real emulator, GCS_LATENCY
    added to every request by a proxy): the chunk pass with entries fetched ahead, against the same pass looking
    each up on its file's turn (the first SEQUENTIAL_FILES files, scaled: one GET after another costs the same
    for each)."""
    import dataclasses

    from nanodata.jobs.cpp_corpus import SETTING_NAMES
    from nanodata.pipeline.chunkbuild.config import ChunkConfig
    from nanodata.pipeline.chunkbuild.sources import hashed_tree_files, tree_item
    from nanodata.testing.emulator import GcsEmulator
    from nanodata.testing.latency import METADATA_IN_MEMORY, LatencyProxy

    tree = work / "gcs" / "tree"
    headers_tree(tree, GCS_FILES)
    # planned as plan() plans them: each file with its content digest, so a hit reads nothing
    items = [tree_item(str(tree), rel, size, gid, None, digest)
             for gid, (rel, size, digest) in enumerate(hashed_tree_files(str(tree), CPP))]
    with GcsEmulator(prelude=METADATA_IN_MEMORY) as emulator:
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.host
        try:
            emulator.create_bucket("bench-cache")
            config = ChunkConfig(**{k: v for k, v in {**PARAMS, "mode": "basic"}.items() if k in SETTING_NAMES},
                                 cache="gs://bench-cache/cache", cache_secret="the benchmark's cache secret")
            settings = config.worker_settings()
            chunk_pass(items, settings, workers=2)  # every entry written, no latency added
            with LatencyProxy(emulator.port, GCS_LATENCY) as proxy:
                os.environ["STORAGE_EMULATOR_HOST"] = proxy.host
                ahead, counts = chunk_pass(items, settings)
                one_by_one = {**settings, "cache": dataclasses.replace(settings["cache"], window=0)}
                sample = items[:SEQUENTIAL_FILES]
                sequential = chunk_pass(sample, one_by_one)[0] * len(items) / len(sample)
        finally:
            os.environ.pop("STORAGE_EMULATOR_HOST")
    print(f"gcs reuse: a {len(items):,}-file partition, every entry in gs:// (the emulator, "
          f"{GCS_LATENCY * 1000:.0f} ms added to every request): {counts['files_reused']:,} files reused; load "
          f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"  wall: fetched ahead {ahead:.1f} s | one lookup after another {sequential:.1f} s (measured on "
          f"{len(sample):,} files, scaled) | ratio {ahead / sequential:.3f} (goal: < {GCS_GOAL:.0f} s); CPU of this "
          f"process fetching ahead {counts['cpu']:.1f} s")
    return ahead < GCS_GOAL and counts["files_reused"] == len(items)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="nanodata-bench-incremental-") as tmp:
        modes = ["basic"] if GIVEN_JSONL else ["basic", "compilable"]
        results = [run_mode(Path(tmp), mode) for mode in modes] + [gcs_reuse(Path(tmp))]
        print(f"goals met: {all(results)}")


if __name__ == "__main__":
    main()
