"""Near-duplicate files (nanodata/pipeline/dedup): signature speed, the components step at scale, and what
`--dedup near` adds to a chunk run.

1. Signatures per second per core, on real C++ (default: every .h/.cc/.cpp/.hpp file under /work/eight, else
   the libstdc++ headers under /usr/include/c++; --corpus DIR): minhash.signature(text), per file, against
   datasketch 2.0.0 MinHash(num_perm=256) (update_batch of the shingles' UTF-8 bytes, its permutations drawn
   once and shared) and rensa 0.5.0 RMinHash(num_perm=256, seed=0) (update with the shingle strings, then
   digest), over the same shingles: BigCode's, lowercase, split on \\W+, the set of 5-grams of tokens as
   strings. Those two need the strings, so their files/s include making them in Python (also printed alone,
   and their hashing alone); ours goes from the text. CPU time of this process (time.process_time), best of
   --runs, taken in turns. Sanity: mean absolute error of each estimate against the exact Jaccard of the two
   shingle sets, on pairs of a file and a mutated copy of it.
2. The components step at scale: --files synthetic signatures (default 4.5M, random uint32 bins), 10% of them
   planted near-copies (an earlier unplanted file's signature with each bin redrawn with probability
   U(0.05, 0.2): estimated Jaccard ~0.8-0.95 to its original), --partition-files per partition, written in
   SignatureSink's layout by a bulk writer (SignatureSink.add/close costs ~2 s per 100K files), which is
   checked byte for byte against SignatureSink + store_signatures on a sample first. Then find_edges for every
   band group (near.group_count of them) and settle, each in its own child process (--jobs at a time): time,
   and the child's own peak RSS (its VmHWM), next to that of a child that only imports. Checked:
   every removed file is a planted copy, and the copies left are the few a perturbation put under the
   threshold or LSH missed (counted exactly from the perturbations). Settle's memory is printed next to the
   signatures' size on disk, and settle runs again on a corpus of 1/4 the files holding the same number of
   planted copies (same pairs, 1/4 the corpus): its memory follows the pairs, not the corpus.
3. `nanodata chunk --dedup near` against `--dedup exact`, same real tree (--corpus, each subdirectory a
   project), basic, one worker, --max-tokens 2048, JSONL: CPU time (user + sys) of the child process
   (getrusage(RUSAGE_CHILDREN) deltas), --chunk-runs runs each in turns, medians; goal near/exact <= 1.15.

All three by default (~9 min on 2 cores, most of it find_edges); --signatures, --components, --chunk pick some; --quick is a much
smaller run of each (~1 min).

    .venv/bin/python benchmarks/bench_near_dedup.py [--quick] [--signatures] [--components] [--chunk]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from nanodata.pipeline.dedup import minhash, near

EIGHT = Path("/work/eight")
LIBSTDCXX = Path("/usr/include/c++")
EXTENSIONS = (".h", ".cc", ".cpp", ".hpp")
TMP_ROOT = Path("/work/tmp-bench")
THRESHOLD = 0.7
FILES = 4_500_000
PARTITION_FILES = 100_000
PLANTED = 0.10
REDRAW = (0.05, 0.20)       # a planted copy redraws each bin with a probability drawn from this range
FREE_GB_AT_DEFAULT = 15     # disk wanted for the default --files (scaled for others)
MAX_TOKENS = 2048
CHUNK_GOAL = 1.15
SEED = 0
PROJECTS = 50
SAMPLE_FILES = 3000         # the bulk writer's byte-for-byte check against SignatureSink
ERROR_PAIRS = 400           # mutated pairs of the Jaccard sanity figure
WORD_SPLIT = re.compile(r"\W+")


def _line(name, measured, unit, reference, ref_unit, ratio, goal=None):
    goal_text = f" (goal {goal})" if goal is not None else ""
    print(f"{name}: measured {measured:,.2f} {unit} | reference {reference:,.2f} {ref_unit} | "
          f"ratio {ratio:.2f}{goal_text}", flush=True)


# ---------------------------------------------------------------- 1. signatures per second per core

def default_corpus() -> Path:
    return EIGHT if EIGHT.is_dir() else LIBSTDCXX


def read_corpus(root: Path) -> list[tuple[str, str]]:
    """(path, text) of every C++ file under root (libstdc++'s extensionless headers too), UTF-8 ones only."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not (name.endswith(EXTENSIONS) or "." not in name and "/c++/" in path):
                continue
            try:
                found.append((path, Path(path).read_bytes().decode("utf-8")))
            except (UnicodeDecodeError, OSError):
                continue
    return found


def shingle_strings(text: str) -> set[str]:
    """BigCode's shingles as strings: the set of 5-grams of the \\W+-separated tokens of the lowercased text."""
    tokens = [t for t in WORD_SPLIT.split(text.lower()) if t]
    return {" ".join(tokens[i:i + minhash.NGRAM]) for i in range(len(tokens) - minhash.NGRAM + 1)}


def _mutate(text: str, pool: list[str], rng: random.Random) -> str:
    """A copy with a share of its lines (2-50%) deleted, replaced by a line of another file, or doubled."""
    share = rng.uniform(0.02, 0.5)
    out = []
    for line in text.splitlines(keepends=True):
        if rng.random() >= share:
            out.append(line)
            continue
        action = rng.randrange(3)
        if action == 1:
            out.append(rng.choice(pool))
        elif action == 2:
            out += [line, line]
    return "".join(out)


def bench_signatures(corpus: Path, limit: int | None, runs: int) -> None:
    from datasketch import MinHash
    from rensa import RMinHash

    files = read_corpus(corpus)
    if limit:
        files = files[::max(1, len(files) // limit)][:limit]
    texts = [text for _, text in files if minhash.signature(text) is not None]  # also warms numpy and the tables
    short = len(files) - len(texts)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(f"corpus: {len(texts)} files, {mb:.2f} MB from {corpus} ({short} with fewer than 5 tokens left out); "
          f"CPU s of this process, best of {runs}")
    perms = MinHash(num_perm=256).permutations  # affine32 (2.0.0's default), drawn once: datasketch's fastest way to sign many files

    def ours():
        return [minhash.signature(t) for t in texts]

    def shingles():
        return [shingle_strings(t) for t in texts]

    def datasketch(sets):
        out = []
        for s in sets:
            m = MinHash(num_perm=256, permutations=perms, scheme="affine32")  # its default scheme
            m.update_batch([x.encode("utf-8") for x in s])
            out.append(m)
        return out

    def rensa(sets):
        out = []
        for s in sets:
            m = RMinHash(num_perm=256, seed=0)
            m.update(list(s))
            m.digest()
            out.append(m)
        return out

    best = {"ours": float("inf"), "shingles": float("inf"), "datasketch": float("inf"), "rensa": float("inf")}
    for _ in range(runs):  # in turns, so a slow spell of the shared machine hits each alike
        start = time.process_time()
        ours()
        best["ours"] = min(best["ours"], time.process_time() - start)
        start = time.process_time()
        sets = shingles()
        best["shingles"] = min(best["shingles"], time.process_time() - start)
        for name, fn in (("datasketch", datasketch), ("rensa", rensa)):
            start = time.process_time()
            fn(sets)
            best[name] = min(best[name], time.process_time() - start)
    # same shingle sets: our distinct 64-bit shingle hashes against the distinct strings, file by file
    differ = sum(len(np.unique(minhash.shingle_hashes(t))) != len(s) for t, s in zip(texts, sets, strict=True))
    print(f"shingle sets: {len(texts) - differ} of {len(texts)} files have as many distinct shingle hashes (ours) "
          f"as distinct 5-gram strings (Python's \\W+)")
    n = len(texts)
    ours_s = best["ours"]
    print(f"Python shingling alone (datasketch and rensa need the strings): {n / best['shingles']:,.1f} files/s, "
          f"{mb / best['shingles']:.2f} MB/s")
    for name in ("datasketch", "rensa"):
        print(f"{name} hashing alone (shingles given): {n / best[name]:,.1f} files/s, {mb / best[name]:.2f} MB/s")
    for name, label in (("datasketch", "datasketch 2.0.0 MinHash(256)"), ("rensa", "rensa 0.5.0 RMinHash(256)")):
        theirs = best["shingles"] + best[name]
        _line(f"signatures/s per core, ours vs {name}", n / ours_s, "files/s", n / theirs,
              f"files/s ({label}, shingling included)", theirs / ours_s)
        _line(f"signature MB/s per core, ours vs {name}", mb / ours_s, "MB/s", mb / theirs, f"MB/s ({label})",
              theirs / ours_s)

    # sanity: estimated against exact Jaccard on a file and a mutated copy of it
    rng = random.Random(SEED)
    pool = [line for t in texts[:200] for line in t.splitlines(keepends=True)]
    errors: dict[str, list[float]] = {"ours": [], "datasketch": [], "rensa": []}
    exact_values = []
    for text in rng.sample(texts, min(ERROR_PAIRS, len(texts))):
        other = _mutate(text, pool, rng)
        a, b = shingle_strings(text), shingle_strings(other)
        if not a or not b:
            continue
        exact = len(a & b) / len(a | b)
        exact_values.append(exact)
        errors["ours"].append(abs(float(minhash.jaccard(minhash.signature(text), minhash.signature(other))) - exact))
        da, db = datasketch([a, b])
        errors["datasketch"].append(abs(da.jaccard(db) - exact))
        ra, rb = rensa([a, b])
        errors["rensa"].append(abs(ra.jaccard(rb) - exact))
    exact = np.array(exact_values)
    # k independent permutations: the estimate is Binomial(k, J)/k, mean |error| ~ sqrt(2/pi) * sqrt(J(1-J)/k)
    expected = float(np.mean(np.sqrt(2 / np.pi * exact * (1 - exact) / minhash.BINS)))
    print(f"Jaccard estimate vs exact, {len(exact)} file/mutated-copy pairs (exact J mean {exact.mean():.2f}, "
          f"{exact.min():.2f}-{exact.max():.2f}), mean |error|: ours {np.mean(errors['ours']):.4f} | datasketch "
          f"{np.mean(errors['datasketch']):.4f} | rensa {np.mean(errors['rensa']):.4f} | 256 independent "
          f"permutations, in theory ~{expected:.4f}", flush=True)


# ---------------------------------------------------------------- 2. the components step at scale

_U64 = np.uint64


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a fixed random-looking function of a uint64 (this benchmark's own copy)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> _U64(30))
        x = x * _U64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> _U64(27))
        x = x * _U64(0x94D049BB133111EB)
        return x ^ (x >> _U64(31))


def base_signatures(gids: np.ndarray, seed: int) -> np.ndarray:
    """(n, BINS) random uint32 bins, a fixed function of (gid, seed): an original is recomputed, never stored."""
    cells = gids.astype(np.uint64)[:, None] * _U64(minhash.BINS) + np.arange(minhash.BINS, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (_mix(cells + _U64(seed) * _U64(0x9E3779B97F4A7C15)) >> _U64(32)).astype(np.uint32)


def plan_corpus(files: int, planted: int, seed: int) -> np.ndarray:
    """original[g]: -1 for an unplanted file, else the earlier unplanted gid its signature is a copy of."""
    rng = np.random.default_rng(seed)
    start = max(1, files // 100)  # the first files are originals only, so every copy has one before it
    copies = np.sort(rng.choice(np.arange(start, files), size=planted, replace=False))
    original = np.full(files, -1, dtype=np.int64)
    original[copies] = 0
    unplanted = np.flatnonzero(original < 0)
    before = np.searchsorted(unplanted, copies)  # unplanted gids below each copy (>= 1)
    original[copies] = unplanted[(rng.random(planted) * before).astype(np.int64)]
    return original


def file_names(gids: np.ndarray, vendored_every: int = 0) -> tuple[list[str], list[str], list[str]]:
    """(path, project, source) of each gid; with vendored_every (the writer's check), every such gid under
    third_party/, a project named `deps`, and paths that start with their project's name."""
    paths, projects, sources = [], [], []
    for g in gids.tolist():
        project = "deps" if vendored_every and g % 11 == 0 else f"p{g % PROJECTS:02d}"  # a project named like a vendor dir
        path = f"third_party/zlib/f{g}.c" if vendored_every and g % vendored_every == 0 else f"src/f{g}.cc"
        if vendored_every and g % 3 == 0:  # the sample: paths under their project's name too (add() strips it)
            path = f"{project}/{path}"
        paths.append(path)
        projects.append(project)
        sources.append(f"{project}/{path}")
    return paths, projects, sources


def write_partition(near_dir: Path, partition: int, gids: np.ndarray, signatures: np.ndarray, sizes: np.ndarray,
                    paths: list[str], projects: list[str], sources: list[str], threshold: float) -> dict:
    """What SignatureSink.add for each file, close(partition) and store_signatures write, in bulk."""
    bands, rows = minhash.lsh_shape(threshold)
    names = [f"{p}\t{s}\n".encode("utf-8", "surrogatepass") for p, s in zip(projects, sources, strict=True)]
    lengths = np.fromiter(map(len, names), dtype=np.uint64, count=len(names))
    records = np.zeros(len(gids), dtype=near.SIG_DTYPE)
    inside = [p[len(q) + 1:] if p.startswith(q + "/") else p for p, q in zip(paths, projects, strict=True)]  # as add()
    records["rank"] = np.fromiter((near.rank_of(g, near.is_vendored(p)) for g, p in zip(gids.tolist(), inside, strict=True)),
                                  dtype=np.uint64, count=len(gids))
    records["size"] = sizes
    records["name_start"] = np.cumsum(lengths) - lengths
    records["name_len"] = lengths - _U64(1)
    records["sig"] = signatures
    keys = minhash.band_keys(records["sig"], bands, rows)
    refs = (_U64(partition) << _U64(32)) | np.arange(len(gids), dtype=np.uint64)
    out = np.zeros((bands, len(gids)), dtype=near.BAND_DTYPE)
    for band in range(bands):
        order = np.lexsort((records["rank"], keys[:, band]))
        out[band]["key"], out[band]["rank"], out[band]["ref"] = keys[order, band], records["rank"][order], refs[order]
    for kind, suffix, data in (("sigs", ".bin", records.tobytes()), ("names", ".txt", b"".join(names)),
                               ("bands", ".bin", out.tobytes())):
        (near_dir / kind).mkdir(parents=True, exist_ok=True)
        (near_dir / kind / f"{partition:05d}{suffix}").write_bytes(data)
    by_project: dict[str, list[int]] = {}
    for project, size in zip(projects, sizes.tolist(), strict=True):
        counts = by_project.setdefault(project, [0, 0])
        counts[0] += 1
        counts[1] += size
    per_band = len(gids) * near.BAND_DTYPE.itemsize
    return {"files": len(gids), "band_offsets": [b * per_band for b in range(bands + 1)],
            "by_project": dict(sorted(by_project.items()))}


def check_bulk_writer(tmp: Path, threshold: float) -> None:
    """Assert: the bulk writer's files and returned dict are SignatureSink's, byte for byte, on a sample."""
    rng = np.random.default_rng(SEED + 1)
    gids = np.sort(rng.choice(10_000_000, size=SAMPLE_FILES, replace=False))
    signatures = base_signatures(gids, SEED)
    sizes = rng.integers(100, 200_000, size=len(gids))
    paths, projects, sources = file_names(gids, vendored_every=7)
    partition = 7
    sink = near.SignatureSink(tmp / "sink", threshold)
    for g, path, size, project, source, signature in zip(gids.tolist(), paths, sizes.tolist(), projects, sources,
                                                         signatures, strict=True):
        sink.add(g, path, size, project, source, signature)
    from_sink = sink.close(partition)
    near.store_signatures(tmp / "sink", str(tmp / "sink_near"), partition)
    from_bulk = write_partition(tmp / "bulk_near", partition, gids, signatures, sizes, paths, projects, sources,
                                threshold)
    assert from_sink == from_bulk, "bulk writer: returned dict differs from SignatureSink.close's"
    stored = sorted(p.relative_to(tmp / "sink_near") for p in (tmp / "sink_near").rglob("*") if p.is_file())
    written = sorted(p.relative_to(tmp / "bulk_near") for p in (tmp / "bulk_near").rglob("*") if p.is_file())
    assert stored == written, f"bulk writer: files {written} != SignatureSink's {stored}"
    for rel in stored:
        assert (tmp / "sink_near" / rel).read_bytes() == (tmp / "bulk_near" / rel).read_bytes(), f"bulk writer: {rel} differs"
    print(f"bulk writer = SignatureSink + store_signatures, byte for byte, on {SAMPLE_FILES} files "
          f"({len(stored)} files compared, vendored paths included)", flush=True)


def write_planted_partition(spec: dict, partition: int) -> dict:
    """One partition of the synthetic corpus (in a child): its planted copies drawn from a generator of its own,
    so partitions can be written in any order; returns its info and the exact expected removals among them."""
    bands, rows = minhash.lsh_shape(spec["threshold"])
    original = np.load(spec["original"], mmap_mode="r")
    rng = np.random.default_rng([spec["seed"], partition])
    lo = partition * spec["per_partition"]
    gids = np.arange(lo, min(spec["files"], lo + spec["per_partition"]), dtype=np.int64)
    signatures = base_signatures(gids, spec["seed"])
    copies = np.flatnonzero(original[gids] >= 0)
    would_pass = found_direct = 0
    if len(copies):
        redraw = rng.uniform(*REDRAW, size=len(copies))[:, None] > rng.random((len(copies), minhash.BINS))
        copied = base_signatures(np.asarray(original[gids[copies]]), spec["seed"])
        fresh = rng.integers(0, 1 << 32, size=copied.shape, dtype=np.uint32)
        signatures[copies] = np.where(redraw, fresh, copied)
        similar = 1 - redraw.mean(axis=1)  # the Jaccard estimate to the original (a fresh draw matching: 2**-32)
        changed_band = redraw[:, :bands * rows].reshape(len(copies), bands, rows).any(axis=2)
        passes = similar >= spec["threshold"]
        would_pass = int(passes.sum())
        found_direct = int((passes & (~changed_band).any(axis=1)).sum())
    sizes = (gids * 7919 % 50_000 + 200).astype(np.uint64)
    paths, projects, sources = file_names(gids)
    info = write_partition(Path(spec["near"]), partition, gids, signatures, sizes, paths, projects, sources,
                           spec["threshold"])
    return {**info, "would_pass": would_pass, "found_direct": found_direct}


def build_corpus(tmp: Path, label: str, files: int, planted: int, args) -> dict:
    """Write the partitions (--jobs children at a time); returns the plan and what the checks need."""
    started = time.perf_counter()
    original = plan_corpus(files, planted, SEED)
    spec = {"near": str(tmp / label), "original": str(tmp / f"{label}-original.npy"), "files": files,
            "per_partition": args.partition_files, "threshold": args.threshold, "seed": SEED}
    np.save(spec["original"], original)
    spec_path = tmp / f"{label}-write.json"
    spec_path.write_text(json.dumps(spec))
    count = -(-files // args.partition_files)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        infos = [r["result"] for r in pool.map(lambda p: run_child(["--child", f"write:{p}", str(spec_path)]),
                                                range(count))]
    by_project: dict[str, list[int]] = {}
    for info in infos:
        for project, (n, size) in info["by_project"].items():
            counts = by_project.setdefault(project, [0, 0])
            counts[0] += n
            counts[1] += size
    near_dir = tmp / label
    disk = {kind: sum(p.stat().st_size for p in (near_dir / kind).iterdir()) for kind in ("sigs", "bands", "names")}
    return {"original": original, "partitions": [[p, info["band_offsets"]] for p, info in enumerate(infos)],
            "by_project": by_project, "would_pass": sum(i["would_pass"] for i in infos),
            "found_direct": sum(i["found_direct"] for i in infos), "disk": disk,
            "seconds": time.perf_counter() - started}


def run_child(argv: list[str]) -> dict:
    """A Python child of this script: its result (last stdout line, JSON), wall s, CPU s (wait4: the child's
    own) and its own peak RSS (its VmHWM, which it reports: wait4's ru_maxrss would count the parent's pages
    that the child held between fork and exec)."""
    env = dict(os.environ, TQDM_DISABLE="1")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode:
        raise RuntimeError(f"child {' '.join(argv)} exited {proc.returncode}: {stderr[-3000:]}")
    report = json.loads(stdout.strip().splitlines()[-1])
    return {"result": report["result"], "seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_mb": report["vmhwm_kb"] / 1024, "read": report["read"]}


def child_main(mode: str, plan_path: str) -> None:
    """In a child: one partition written, one band group's find_edges, settle, or nothing (the import baseline)."""
    plan = json.loads(Path(plan_path).read_text())
    if mode.startswith("write:"):
        result = write_planted_partition(plan, int(mode.split(":")[1]))
    elif mode == "imports":
        result = {}
    elif mode == "settle":
        summary = near.settle(plan["near"], plan["groups"], plan["by_project"], plan["threshold"])
        result = {k: summary[k] for k in ("files_removed", "clusters", "candidate_pairs_verified")}
    else:
        group = int(mode.split(":")[1])
        bands, _ = minhash.lsh_shape(plan["threshold"])
        result = near.find_edges(plan["near"], group, near.group_bands(bands, plan["groups"], group),
                                 [tuple(p) for p in plan["partitions"]], plan["threshold"])
    with open("/proc/self/status") as f:
        vmhwm_kb = int(next(line for line in f if line.startswith("VmHWM:")).split()[1])
    with open("/proc/self/io") as f:  # bytes this process read (from files, page cache or not)
        read = int(next(line for line in f if line.startswith("rchar:")).split()[1])
    print("\n" + json.dumps({"result": result, "vmhwm_kb": vmhwm_kb, "read": read}), flush=True)


def components_at(tmp: Path, label: str, files: int, planted: int, args) -> dict:
    """Build a corpus, find its edges and settle it, in child processes; check the removed files."""
    near_dir = tmp / label
    built = build_corpus(tmp, label, files, planted, args)
    disk = built["disk"]
    print(f"[{label}] {files:,} signatures, {planted:,} planted copies, {len(built['partitions'])} partitions "
          f"written in {built['seconds']:.1f} s ({args.jobs} children at a time): sigs {disk['sigs'] / 1e9:.2f} GB, band keys "
          f"{disk['bands'] / 1e9:.2f} GB, names {disk['names'] / 1e6:.0f} MB", flush=True)
    bands, _ = minhash.lsh_shape(args.threshold)
    groups = near.group_count(files, bands)
    plan = {"near": str(near_dir), "groups": groups, "partitions": built["partitions"],
            "by_project": built["by_project"], "threshold": args.threshold}
    plan_path = tmp / f"{label}-plan.json"
    plan_path.write_text(json.dumps(plan))
    baseline = run_child(["--child", "imports", str(plan_path)])["peak_mb"]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(lambda g: run_child(["--child", f"group:{g}", str(plan_path)]), range(groups)))
    wall = time.perf_counter() - started
    pairs = sum(r["result"]["candidate_pairs"] for r in runs)
    edges = sum(r["result"]["edges"] for r in runs)
    peak = max(r["peak_mb"] for r in runs)
    cpu = sum(r["cpu_s"] for r in runs)
    used = [r for g, r in zip(range(groups), runs, strict=True) if len(near.group_bands(bands, groups, g))]
    read = max(r["read"] for r in used)
    print(f"[{label}] band groups: {groups} x find_edges ({len(used)} holding some of the {bands} bands), "
          f"{args.jobs} children at a time: {wall:.1f} s wall, {cpu:.1f} CPU s ({cpu / len(used):.2f} per group "
          f"holding bands); {pairs:,} candidate pair checks and {edges:,} edges (summed over groups); peak RSS of "
          f"one group {peak:,.0f} MB (mean {np.mean([r['peak_mb'] for r in used]):,.0f}; a child that only "
          f"imports: {baseline:,.0f} MB); read by one group up to {read / 1e9:.2f} GB (sigs on disk "
          f"{disk['sigs'] / 1e9:.2f} GB)", flush=True)
    settled = run_child(["--child", "settle", str(plan_path)])
    summary = settled["result"]
    print(f"[{label}] settle: {settled['seconds']:.1f} s wall, {settled['cpu_s']:.1f} CPU s, peak RSS "
          f"{settled['peak_mb']:,.0f} MB; {summary['candidate_pairs_verified']:,} edges -> "
          f"{summary['clusters']:,} clusters, {summary['files_removed']:,} files removed", flush=True)
    removed = near.load_removed(str(near_dir)).astype(np.int64)
    original = built["original"]
    wrongly = int((original[removed] < 0).sum())
    missed = planted - (len(removed) - wrongly)
    print(f"[{label}] check: {len(removed):,} removed of {planted:,} planted; {built['would_pass']:,} planted at "
          f"or above {args.threshold} to their original, {built['found_direct']:,} of them sharing a band with it; "
          f"planted copies kept {missed:,} ({len(removed) - wrongly - built['found_direct']:,} removed through another copy); "
          f"unplanted files removed {wrongly} (must be 0)", flush=True)
    assert wrongly == 0, f"{wrongly} unplanted files removed"
    assert summary["files_removed"] == len(removed)
    # a copy at or above the threshold sharing a band with its original is checked against it (the smallest rank
    # of that band's key); one that does not may still join through another copy of the same original
    assert len(removed) - wrongly >= built["found_direct"], "planted copies LSH should have found were kept"
    return {"files": files, "planted": planted, "edges": summary["candidate_pairs_verified"],
            "settle_mb": settled["peak_mb"], "baseline_mb": baseline, "disk": disk, "near_dir": near_dir}


def bench_components(args) -> None:
    TMP_ROOT.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(TMP_ROOT).free
    need = max(1e9, FREE_GB_AT_DEFAULT * 1e9 * args.files / FILES)
    if free < need:
        raise SystemExit(f"components: {free / 1e9:.1f} GB free under {TMP_ROOT}, {need / 1e9:.1f} GB wanted for "
                         f"--files {args.files:,} (~2 KB of signatures and band keys per file, plus the 1/4 run); "
                         f"free some disk or pass a smaller --files")
    planted = int(args.files * PLANTED)
    quarter = args.files // 4
    print(f"free disk under {TMP_ROOT}: {free / 1e9:.0f} GB (wanted {need / 1e9:.1f} GB); threshold "
          f"{args.threshold}, LSH {minhash.lsh_shape(args.threshold)} (bands, rows)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="near-", dir=TMP_ROOT))
    try:
        check_bulk_writer(tmp, args.threshold)
        full = components_at(tmp, "full", args.files, planted, args)
        shutil.rmtree(full["near_dir"])
        small = components_at(tmp, "quarter", quarter, planted, args)
        shutil.rmtree(small["near_dir"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if TMP_ROOT.is_dir() and not any(TMP_ROOT.iterdir()):
            TMP_ROOT.rmdir()
    sigs = full["disk"]["sigs"] + full["disk"]["bands"]
    _line("settle peak RSS vs the signatures it settles (on disk: sigs + band keys)", full["settle_mb"], "MB",
          sigs / 2**20, "MB on disk", full["settle_mb"] / (sigs / 2**20))
    net_full, net_small = full["settle_mb"] - full["baseline_mb"], small["settle_mb"] - small["baseline_mb"]
    print(f"settle at 1/4 the files, same planted copies: {small['files']:,} files, {small['edges']:,} edges, "
          f"{small['settle_mb']:,.0f} MB ({net_small:,.0f} above imports) | {full['files']:,} files, "
          f"{full['edges']:,} edges, {full['settle_mb']:,.0f} MB ({net_full:,.0f} above imports) | memory ratio "
          f"{small['settle_mb'] / full['settle_mb']:.2f} (above imports {net_small / max(net_full, 1e-9):.2f}), "
          f"files ratio {small['files'] / full['files']:.2f}, edges ratio {small['edges'] / max(full['edges'], 1):.2f}",
          flush=True)


# ---------------------------------------------------------------- 3. --dedup near against --dedup exact

def bench_chunk(tree: Path, runs: int, threshold: float) -> None:
    cli = [sys.executable, "-m", "nanodata.cli", "chunk"]
    helptext = subprocess.run([*cli, "--help"], capture_output=True, text=True).stdout
    if "--dedup" not in helptext:
        print("chunk --dedup near vs exact: skipped: this checkout's `nanodata chunk` has no --dedup")
        return
    cpu: dict[str, list[float]] = {"exact": [], "near": []}
    docs = {}
    removed = None
    with tempfile.TemporaryDirectory(prefix="near-chunk-") as tmp:
        for r in range(runs):
            for dedup in ("exact", "near") if r % 2 == 0 else ("near", "exact"):
                out = Path(tmp) / f"{dedup}.jsonl"
                extra = ["--near-threshold", str(threshold)] if dedup == "near" else []
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                done = subprocess.run([*cli, "--project-dirs", str(tree), "--output", str(out), "--mode", "basic",
                                       "--max-tokens", str(MAX_TOKENS), "--workers", "1", "--dedup", dedup,
                                       "--no-progress", *extra], capture_output=True, text=True,
                                      env=dict(os.environ, TQDM_DISABLE="1"))
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode:
                    raise RuntimeError(f"chunk --dedup {dedup} exited {done.returncode}: {done.stderr[-3000:]}")
                cpu[dedup].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                summary = json.loads(Path(f"{out}.done").read_text())
                docs[dedup] = summary.get("docs")
                if dedup == "near":
                    removed = (summary.get("near_duplicates") or {}).get("files_removed")
                out.unlink()
    exact, near_ = statistics.median(cpu["exact"]), statistics.median(cpu["near"])
    print(f"chunk {tree} (basic, 1 worker, --max-tokens {MAX_TOKENS}): docs exact {docs['exact']}, near "
          f"{docs['near']} ({removed} files removed as near-copies); CPU s per run exact "
          f"{', '.join(f'{s:.2f}' for s in cpu['exact'])}, near {', '.join(f'{s:.2f}' for s in cpu['near'])}")
    _line(f"chunk --dedup near vs exact, median CPU s of {runs} in turns", near_, "CPU s (near)", exact,
          "CPU s (exact)", near_ / exact, f"<= {CHUNK_GOAL}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--signatures", action="store_true", help="1: signatures per second per core")
    parser.add_argument("--components", action="store_true", help="2: band groups and settle at scale")
    parser.add_argument("--chunk", action="store_true", help="3: chunk --dedup near vs exact")
    parser.add_argument("--quick", action="store_true", help="a much smaller run of each part (~1 min)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help=f"real C++ tree for 1 and 3 (default {EIGHT} if it exists, else {LIBSTDCXX})")
    parser.add_argument("--runs", type=int, default=None, help="1: best of this many timings (default 3, quick 1)")
    parser.add_argument("--files", type=int, default=None, help=f"2: synthetic signatures (default {FILES:,}, "
                        "quick 200,000)")
    parser.add_argument("--partition-files", type=int, default=None,
                        help=f"2: files per partition (default {PARTITION_FILES:,}, quick 20,000)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="2: find_edges children at a time (default: the cores)")
    parser.add_argument("--chunk-runs", type=int, default=None, help="3: runs of each, in turns (default 3, quick 1)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help=f"Jaccard threshold (default {THRESHOLD})")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args([] if __name__ != "__main__" else None)
    if args.child:
        child_main(*args.child)
        return
    args.runs = args.runs or (1 if args.quick else 3)
    args.files = args.files or (200_000 if args.quick else FILES)
    args.partition_files = args.partition_files or (20_000 if args.quick else PARTITION_FILES)
    args.chunk_runs = args.chunk_runs or (1 if args.quick else 3)
    corpus = args.corpus or default_corpus()
    everything = not (args.signatures or args.components or args.chunk)
    if args.signatures or everything:
        print("--- 1. signatures per second per core", flush=True)
        bench_signatures(corpus, 300 if args.quick else None, args.runs)
    if args.components or everything:
        print("--- 2. band groups and components at scale", flush=True)
        bench_components(args)
    if args.chunk or everything:
        print("--- 3. chunk --dedup near vs --dedup exact", flush=True)
        bench_chunk(corpus, args.chunk_runs, args.threshold)


if __name__ == "__main__":
    main()
