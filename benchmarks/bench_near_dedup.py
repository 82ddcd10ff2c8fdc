"""Near-duplicate files (nanodata/pipeline/dedup): signature speed, the components step at scale, what
`--dedup near` adds to a chunk run, and its removals scored against exact Jaccard.

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

4. (--scored, opt-in: ~8 min on 2 shared cores: eight chunk runs, and 3's six) Which files each rule removes, scored
   against the exact Jaccard of BigCode's shingles, this checkout (a file removed only for a kept twin) beside the
   old rule (--old-root, default /tmp/old: a checkout of e72a3d3, run under PYTHONPATH; every file of a connected
   component but its first removed), on --corpus and on --corpus + planted copies: PLANTED_COPIES near-copies (1% of
   identifier uses renamed, exact J 0.80-0.99 to the original) and as many far copies (20%, exact J <= 0.40) of
   distinct originals (seeded), in a project dir given after the corpus (so after their originals in input order).
   Each rule runs chunk_to_jsonl(basic, --max-tokens 2048, --dedup near, filters and redaction off) in a child, twice
   (the second with 2 workers), its summary naming every removed file and its twin. A removal is justified when some
   kept file is at exact J >= 0.7 to it, questionable at 0.5-0.7, false below; exact J is computed for the pairs
   estimated at >= 0.4 only (every pair's signatures compared on 64 bins, then on all: no O(n^2) set comparisons; a
   pair at exact J 0.5 is missed with probability ~1e-3). Also: planted near-copies with one side removed, far copies
   removed, groups (connected files at exact J >= 0.8) removed whole with no kept file at >= 0.7, the removed set of
   the second run, the full signature's estimate's error on real pairs at exact J 0.6-0.8, questionable removals whose twin
   edge was estimated under threshold + 0.05, and 3's cost ratio (run if 3 was not). Goals: no removal without a kept
   file at J >= 0.5; questionable <= 3% of removals; no group at J >= 0.8 removed whole; near/exact <= 1.15.

1-3 by default (~9 min on 2 cores, most of it find_edges); --signatures, --components, --chunk, --scored pick
some; --quick is a much smaller run of each (~1 min; 4: 100 copies of each kind and 3 once, ~4 min).

    .venv/bin/python benchmarks/bench_near_dedup.py [--quick] [--signatures] [--components] [--chunk] [--scored]
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


def run_child(argv: list[str], pythonpath: str | None = None) -> dict:
    """A Python child of this script: its result (last stdout line, JSON), wall s, CPU s (wait4: the child's
    own) and its own peak RSS (its VmHWM, which it reports: wait4's ru_maxrss would count the parent's pages
    that the child held between fork and exec). pythonpath: put first on its path (another checkout's nanodata)."""
    env = dict(os.environ, TQDM_DISABLE="1")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
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
    elif mode == "near-run":
        result = near_run(plan)
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

def bench_chunk(tree: Path, runs: int, threshold: float) -> float | None:
    cli = [sys.executable, "-m", "nanodata.cli", "chunk"]
    helptext = subprocess.run([*cli, "--help"], capture_output=True, text=True).stdout
    if "--dedup" not in helptext:
        print("chunk --dedup near vs exact: skipped: this checkout's `nanodata chunk` has no --dedup")
        return None
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
    return near_ / exact


# ---------------------------------------------------------------- 4. removals scored against exact Jaccard

SCORED_BY_DEFAULT = False   # 4 is opt-in (--scored): see the module docstring
OLD_ROOT = Path("/tmp/old")  # the previous rule's checkout (e72a3d3: every file of a component but its first removed)
PLANTED_COPIES = 300         # near-copies, and as many far copies
NEAR_RENAME, NEAR_RANGE = 0.01, (0.80, 0.99)  # share of identifier uses renamed, exact Jaccard wanted to the original
FAR_RENAME, FAR_RANGE = 0.20, (0.0, 0.40)
MIN_SHINGLES = 200           # an original has at least this many (so a 1% rename lands in NEAR_RANGE)
JUSTIFIED, QUESTIONABLE = 0.7, 0.5   # a removal's best exact Jaccard to a kept file: >= 0.7, 0.5-0.7, else false
GROUP_J = 0.8                # groups: connected files at exact J >= this
CANDIDATE_J = 0.4            # pairs scored exactly: a full signature's estimate at or above this
QUESTIONABLE_GOAL = 0.03
NEAR_EDGE = 0.05             # "near the threshold": an estimate in [threshold, threshold + this)
IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*")
CPP_KEYWORDS = frozenset("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
    char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
    decltype default define defined delete do double dynamic_cast elif else endif enum error explicit export extern
    false float for friend goto if ifdef ifndef include inline int long mutable namespace new noexcept not not_eq
    nullptr operator or or_eq pragma private protected public register reinterpret_cast requires return short signed
    sizeof static static_assert static_cast struct switch template this thread_local throw true try typedef typeid
    typename undef union unsigned using virtual void volatile wchar_t while xor xor_eq""".split())
_GRAM_MULTIPLIERS = [_U64(c) for c in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                                       0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD)]


def shingle_set(text: str) -> np.ndarray:
    """BigCode's shingle set (lowercase, split on \\W+, the distinct 5-grams of tokens) as sorted unique 64-bit
    hashes of the 5-grams: exact Jaccard up to a 2**-64 collision per pair of shingles (checked on a sample against
    shingle_strings)."""
    tokens = [t for t in WORD_SPLIT.split(text.lower()) if t]
    n = len(tokens) - minhash.NGRAM + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = np.array([hash(t) for t in tokens], dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        gram = h[:n] * _GRAM_MULTIPLIERS[0]
        for k in range(1, minhash.NGRAM):
            gram = gram + h[k:k + n] * _GRAM_MULTIPLIERS[k]
    return np.unique(_mix(gram))


def exact_j(a: np.ndarray, b: np.ndarray) -> float:
    shared = len(np.intersect1d(a, b, assume_unique=True))
    union = len(a) + len(b) - shared
    return shared / union if union else 1.0


def corpus_files(roots: list[Path]) -> list[tuple[str, str]]:
    """(source, text) of every file a chunk run over these project dirs reads, in its input order, named as its
    docs and near-dedup's summary name them and read as it reads them (this checkout's tree_items, load_text)."""
    from nanodata.pipeline.chunkbuild.sources import SourceFile, load_text, tree_items
    from nanodata.settings import CPP_EXTENSIONS

    files = []
    for number, root in enumerate(roots):
        for item in tree_items(str(root), number, CPP_EXTENSIONS, None):
            if isinstance(item, SourceFile):
                text, _ = load_text(item)
                if text is not None:
                    files.append((item.source, text))
    return files


def rename_identifiers(text: str, rate: float, rng: random.Random) -> str:
    """A copy with each use of an identifier (a C++ keyword or preprocessor word is none) renamed, with
    probability rate, to NAME_zq."""
    def swap(match: re.Match) -> str:
        word = match.group(0)
        return word if word in CPP_KEYWORDS or rng.random() >= rate else f"{word}_zq"

    return IDENTIFIER.sub(swap, text)


def planted_copy(text: str, base: np.ndarray, rate: float, bounds: tuple[float, float],
                 seed: int) -> tuple[str, float] | None:
    """A renamed copy whose exact Jaccard to text lies in bounds (the rate nudged, 40 tries), else None."""
    rng = random.Random(seed)
    for _ in range(40):
        copy = rename_identifiers(text, rate, rng)
        j = exact_j(base, shingle_set(copy))
        if bounds[0] <= j <= bounds[1]:
            return copy, j
        rate = min(1.0, rate * (1.15 if j > bounds[1] else 1 / 1.15))
    return None


def plant(files: list[tuple[str, str]], sets: list[np.ndarray], root: Path, count: int) -> dict:
    """Near- and far copies of distinct originals (not vendored, MIN_SHINGLES shingles or more, drawn with SEED)
    written under root/planted/{near,far}/SOURCE: a project dir given after the corpus, so each copy comes after
    its original in input order. Returns {"near": [(original source, copy source, exact J)], "far": [...]}."""
    def vendored(source: str) -> bool:
        return near.is_vendored(source.partition("/")[2])

    eligible = [i for i, (source, _) in enumerate(files) if len(sets[i]) >= MIN_SHINGLES and not vendored(source)]
    rng = random.Random(SEED)
    order = rng.sample(eligible, len(eligible))
    out: dict[str, list] = {"near": [], "far": []}
    for kind, rate, bounds in (("near", NEAR_RENAME, NEAR_RANGE), ("far", FAR_RENAME, FAR_RANGE)):
        while len(out[kind]) < count and order:
            i = order.pop()
            made = planted_copy(files[i][1], sets[i], rate, bounds, SEED * 1_000_003 + i)
            if made is None:
                continue
            source = f"planted/{kind}/{files[i][0]}"
            path = root / source
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(made[0].encode("utf-8", "surrogateescape"))
            out[kind].append((files[i][0], source, made[1]))
        if len(out[kind]) < count:
            raise SystemExit(f"scored: only {len(out[kind])} {kind} copies planted of {count} (too few originals)")
    return out


def near_run(plan: dict) -> dict:
    """In a child (this checkout's nanodata, or the old rule's through PYTHONPATH): chunk_to_jsonl --dedup near
    over the plan's project dirs; every removed file with its twin and their edge's estimate."""
    from nanodata.pipeline.chunkbuild import chunk_to_jsonl

    near.EXAMPLES_KEPT = 1 << 40  # the summary names every removed file (it names 1000 otherwise)
    with tempfile.TemporaryDirectory(prefix="near-scored-") as tmp:
        summary = chunk_to_jsonl(Path(tmp) / "docs.jsonl", project_dirs=plan["roots"], mode="basic",
                                 max_tokens=MAX_TOKENS, dedup="near", near_threshold=plan["threshold"],
                                 filters="none", redact="none", workers=plan["workers"])
    found = summary["near_duplicates"]
    assert len(found["examples"]) == found["files_removed"]
    return {"module": near.__file__, "files_removed": found["files_removed"], "files_signed": found["files_signed"],
            "removed": [[e["removed"], e["kept"], e["jaccard"]] for e in found["examples"]]}


def similar_pairs(sigs: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, estimate) of every pair i < j whose full signature's estimate is >= floor: all pairs on 64 bins first (at
    floor - 0.15: a pair at floor + 0.1 falls under it with probability ~1e-4), then the full signature."""
    head = np.ascontiguousarray(sigs[:, :64])
    found_i, found_j = [], []
    for lo in range(0, len(sigs), 64):
        agree = (head[lo:lo + 64, None, :] == head[None, :, :]).mean(axis=2)
        i, j = np.nonzero(agree >= floor - 0.15)
        i = i + lo
        keep = j > i
        found_i.append(i[keep])
        found_j.append(j[keep])
    i, j = np.concatenate(found_i), np.concatenate(found_j)
    estimate = minhash.jaccard(sigs[i], sigs[j]) if len(i) else np.zeros(0)
    keep = estimate >= floor
    return i[keep], j[keep], estimate[keep]


class Scored:
    """A corpus' files, their exact shingle sets and signatures, and the exact Jaccard of every pair worth it."""

    def __init__(self, files: list[tuple[str, str]], sets: list[np.ndarray], planted: set[str]):
        self.sources = [source for source, _ in files]
        self.index = {source: n for n, source in enumerate(self.sources)}
        self.sets = sets
        self.planted = np.array([s in planted for s in self.sources])
        signed = [n for n, s in enumerate(sets) if len(s)]
        self.signed = np.zeros(len(files), dtype=bool)
        self.signed[signed] = True
        # the low 16 bits of each bin: what find_edges compares
        sigs = np.stack([minhash.signature(files[n][1]) for n in signed]).astype(np.uint16)
        i, j, estimate = similar_pairs(sigs, CANDIDATE_J)
        self.pairs: dict[tuple[int, int], tuple[float, float]] = {}  # (a, b) a < b -> (estimate, exact J)
        for a, b, e in zip(np.asarray(signed)[i].tolist(), np.asarray(signed)[j].tolist(), estimate.tolist(),
                           strict=True):
            self.pairs[(a, b)] = (e, exact_j(sets[a], sets[b]))
        self.neighbours: list[list[tuple[int, float]]] = [[] for _ in files]
        for (a, b), (_, j) in self.pairs.items():
            self.neighbours[a].append((b, j))
            self.neighbours[b].append((a, j))

    def score(self, run: dict, threshold: float, planted: dict | None) -> dict:
        """A run's removals against exact Jaccard: each removed file's best kept file, the classes, the groups at
        GROUP_J removed whole, the planted copies."""
        unknown = [r for r, k, _ in run["removed"] if r not in self.index or k not in self.index]
        assert not unknown, f"removed/kept files not in the corpus: {unknown[:5]}"
        removed = np.zeros(len(self.sources), dtype=bool)
        removed[[self.index[r] for r, _, _ in run["removed"]]] = True
        kept = self.signed & ~removed
        best = {}
        for r in np.flatnonzero(removed).tolist():
            best[r] = max((j for other, j in self.neighbours[r] if kept[other]), default=0.0)
        values = np.array(list(best.values()))
        total = len(values)
        classes = {"justified": int((values >= JUSTIFIED).sum()),
                   "questionable": int(((values >= QUESTIONABLE) & (values < JUSTIFIED)).sum()),
                   "false": int((values < QUESTIONABLE).sum())}
        # questionable removals whose edge to their twin was estimated just over the threshold
        twin_estimate = {self.index[r]: e for r, _, e in run["removed"]}
        edge_questionable = sum(QUESTIONABLE <= best[r] < JUSTIFIED and twin_estimate[r] < threshold + NEAR_EDGE
                                for r in best)
        # groups: connected files at exact J >= GROUP_J; removed whole, with no member's kept file at >= JUSTIFIED
        parent = list(range(len(self.sources)))

        def root(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for (a, b), (_, j) in self.pairs.items():
            if j >= GROUP_J:
                parent[root(a)] = root(b)
        groups: dict[int, list[int]] = {}
        for (a, b), (_, j) in self.pairs.items():
            if j >= GROUP_J:
                for x in (a, b):
                    groups.setdefault(root(x), []).append(x)
        whole = [sorted(set(m)) for m in groups.values()
                 if all(removed[x] for x in m) and max(best[x] for x in m) < JUSTIFIED]
        worst = sorted((best[r], self.sources[r], twin) for r, twin, _ in
                       ((self.index[r], k, e) for r, k, e in run["removed"]))[:5]
        out = {"removals": total, **classes, "edge_questionable": edge_questionable, "groups": len(groups),
               "whole": len(whole), "whole_files": sum(map(len, whole)), "worst": worst,
               "removed_set": sorted(r for r, _, _ in run["removed"])}
        if planted:
            out["near_hit"] = sum(removed[self.index[o]] or removed[self.index[c]] for o, c, _ in planted["near"])
            out["far_removed"] = sum(bool(removed[self.index[c]]) for _, c, _ in planted["far"])
            out["planted_near"], out["planted_far"] = len(planted["near"]), len(planted["far"])
        return out

    def estimate_error(self, low: float = 0.6, high: float = 0.8) -> tuple[int, float, float]:
        """(pairs, mean |estimate - exact|, mean estimate - exact) of the unplanted pairs at exact J in [low, high]."""
        errors = [e - j for (a, b), (e, j) in self.pairs.items()
                  if low <= j <= high and not self.planted[a] and not self.planted[b]]
        if not errors:
            return 0, float("nan"), float("nan")
        return len(errors), float(np.mean(np.abs(errors))), float(np.mean(errors))


def bench_scored(corpus: Path, args, cost: float | None) -> None:
    """Each rule's removals on the corpus and on the corpus + planted copies, scored against exact Jaccard."""
    old = args.old_root if (args.old_root / "nanodata").is_dir() else None
    count = 100 if args.quick else PLANTED_COPIES
    TMP_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="scored-", dir=TMP_ROOT))
    started = time.perf_counter()
    try:
        rules = [("ours", None)] + ([("old", str(old))] if old else [])

        def runs_of(label: str, roots: list[Path]):
            # each rule run twice (the second with 2 workers: the removed set is the same for any worker count)
            specs = []
            for rule, pythonpath in rules:
                for attempt, workers in enumerate((1, 2)):
                    plan_path = tmp / f"{label}-{rule}-{attempt}.json"
                    plan_path.write_text(json.dumps({"roots": [str(r) for r in roots], "workers": workers,
                                                     "threshold": args.threshold}))
                    specs.append(((rule, attempt), plan_path, pythonpath))
            return specs

        pool = ThreadPoolExecutor(max_workers=args.jobs)
        futures = {}
        for corpus_label, roots in (("base", [corpus]), ("planted", [corpus, tmp / "planted-root"])):
            if corpus_label == "planted":  # the corpus' own runs go on meanwhile
                files = corpus_files([corpus])
                sets = [shingle_set(text) for _, text in files]
                sample = files[:300]
                differ = sum(len(shingle_set(t)) != len(shingle_strings(t)) for _, t in sample)
                assert differ == 0, f"shingle_set: {differ} of {len(sample)} files differ from shingle_strings"
                planted = plant(files, sets, tmp / "planted-root", count)
                print(f"planted {count} near-copies ({NEAR_RENAME:.0%} of identifier uses renamed, exact J "
                      f"{min(j for *_, j in planted['near']):.3f}-{max(j for *_, j in planted['near']):.3f}) and {count} "
                      f"far copies ({FAR_RENAME:.0%}, exact J {min(j for *_, j in planted['far']):.3f}-"
                      f"{max(j for *_, j in planted['far']):.3f}) of {2 * count} distinct originals (not vendored, "
                      f">= {MIN_SHINGLES} shingles, seed {SEED}), in a project dir after {corpus}", flush=True)
            for key, plan_path, pythonpath in runs_of(corpus_label, roots):
                futures[(corpus_label, *key)] = pool.submit(run_child, ["--child", "near-run", str(plan_path)],
                                                            pythonpath)
        all_files = files + corpus_files([tmp / "planted-root"])
        all_sets = sets + [shingle_set(text) for _, text in all_files[len(files):]]
        copies = {c for kind in ("near", "far") for _, c, _ in planted[kind]}
        scorers = {"base": Scored(files, sets, set()), "planted": Scored(all_files, all_sets, copies)}
        results = {key: f.result() for key, f in futures.items()}
        pool.shutdown()
        for (_, rule, attempt), run in sorted(results.items()):
            if attempt == 0:
                expected = str(old) if rule == "old" else str(Path(__file__).resolve().parents[1])
                assert run["result"]["module"].startswith(expected), f"{rule}: imported {run['result']['module']}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"scored runs: {len(results)} chunk runs (basic, --max-tokens {MAX_TOKENS}, filters and redaction off, "
          f"{args.jobs} at a time) and the scoring in {time.perf_counter() - started:.0f} s; candidates: pairs "
          f"estimated at >= {CANDIDATE_J} ({minhash.BINS} bins), scored on exact Jaccard (BigCode's shingles)", flush=True)
    if cost is None:
        cost = bench_chunk(corpus, args.chunk_runs, args.threshold)
    names = {"ours": "ours (this checkout)", "old": f"old rule ({old})"}
    columns = [rule for rule, _ in rules]
    for corpus_label, scorer in scorers.items():
        label = f"{corpus}" + (f" + {count}+{count} planted copies" if corpus_label == "planted" else "")
        scores, repeat = {}, {}
        for rule in columns:
            first, second = results[(corpus_label, rule, 0)]["result"], results[(corpus_label, rule, 1)]["result"]
            scores[rule] = scorer.score(first, args.threshold, planted if corpus_label == "planted" else None)
            repeat[rule] = sorted(r for r, _, _ in second["removed"]) == scores[rule]["removed_set"]
        print(f"--- scored removals: {label} ({len(scorer.sources)} files, {int(scorer.signed.sum())} signed; "
              f"{len(scorer.pairs)} pairs at estimate >= {CANDIDATE_J})", flush=True)
        scored_table(scores, repeat, {r: names[r] for r in columns}, args.threshold, cost)
        pairs, error, bias = scorer.estimate_error()
        print(f"{minhash.BINS}-bin estimate (the low 16 bits find_edges compares) on {pairs} real pairs at exact J 0.6-0.8: "
              f"mean |error| {error:.4f}, mean error {bias:+.4f} (estimate - exact); in theory ~"
              f"{np.sqrt(2 / np.pi * 0.7 * 0.3 / minhash.BINS):.4f} at J 0.7", flush=True)
        for rule in columns:
            for j, source, twin in (w for w in scores[rule]["worst"] if w[0] < JUSTIFIED):
                print(f"  {rule}: removed {source} (best kept exact J {j:.3f}; twin named {twin})")


def scored_table(scores: dict, repeat: dict, names: dict, threshold: float, cost: float | None) -> None:
    """One corpus' figures, a column per rule, each row's goal last."""
    columns = list(names)
    print(f"{'':58s}" + "".join(f"{names[r]:>26s}" for r in columns) + "   goal")

    def row(text: str, values: dict, goal: str = "") -> None:
        print(f"{text:58s}" + "".join(f"{values[r]:>26s}" for r in columns) + f"   {goal}")

    def share(rule: str, key: str) -> str:
        n, total = scores[rule][key], scores[rule]["removals"]
        return f"{n} ({n / total:.1%})" if total else "0"

    row("files removed", {r: str(scores[r]["removals"]) for r in columns})
    row(f"  justified (a kept file at exact J >= {JUSTIFIED})", {r: share(r, "justified") for r in columns})
    row(f"  questionable (best kept file at {QUESTIONABLE}-{JUSTIFIED})", {r: share(r, "questionable") for r in columns},
        f"<= {QUESTIONABLE_GOAL:.0%} of removals")
    row(f"  false (best kept file < {QUESTIONABLE})", {r: share(r, "false") for r in columns},
        f"0 (every removal has a kept file at >= {QUESTIONABLE})")
    row(f"groups at exact J >= {GROUP_J} removed whole (no kept >= {JUSTIFIED})",
        {r: f"{scores[r]['whole']} of {scores[r]['groups']} ({scores[r]['whole_files']} files)" for r in columns}, "0")
    row("same removed set on a second run (2 workers)", {r: "yes" if repeat[r] else "NO" for r in columns}, "yes")
    if "near_hit" in scores[columns[0]]:
        count = scores[columns[0]]["planted_near"]
        row("planted near-copies with one side removed",
            {r: f"{scores[r]['near_hit']}/{scores[r]['planted_near']}" for r in columns}, f"{count}/{count}")
        row("planted far copies removed", {r: f"{scores[r]['far_removed']}/{scores[r]['planted_far']}" for r in columns},
            "0")
    row(f"questionable with twin edge estimated < {threshold + NEAR_EDGE:.2f}",
        {r: f"{scores[r]['edge_questionable']} of {scores[r]['questionable']}" for r in columns})
    row("cost: chunk --dedup near / exact, CPU (section 3)",
        {r: f"{cost:.2f}x" if r == "ours" and cost is not None else "-" for r in columns}, f"<= {CHUNK_GOAL}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--signatures", action="store_true", help="1: signatures per second per core")
    parser.add_argument("--components", action="store_true", help="2: band groups and settle at scale")
    parser.add_argument("--chunk", action="store_true", help="3: chunk --dedup near vs exact")
    parser.add_argument("--scored", action="store_true",
                        help="4: each rule's removals scored against exact Jaccard, planted copies included")
    parser.add_argument("--old-root", type=Path, default=OLD_ROOT,
                        help=f"4: a checkout of the previous rule, run beside ours (default {OLD_ROOT})")
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
    everything = not (args.signatures or args.components or args.chunk or args.scored)
    if args.signatures or everything:
        print("--- 1. signatures per second per core", flush=True)
        bench_signatures(corpus, 300 if args.quick else None, args.runs)
    if args.components or everything:
        print("--- 2. band groups and components at scale", flush=True)
        bench_components(args)
    cost = None
    if args.chunk or everything:
        print("--- 3. chunk --dedup near vs --dedup exact", flush=True)
        cost = bench_chunk(corpus, args.chunk_runs, args.threshold)
    if args.scored or everything and SCORED_BY_DEFAULT:
        print("--- 4. removals scored against exact Jaccard, ours vs the old rule", flush=True)
        bench_scored(corpus, args, cost)


if __name__ == "__main__":
    main()
