"""Shared by bench_chunk_memory.py and bench_chunk_workers.py: corpora built from real C++ (the headers
of this machine), a watcher of a process tree's peak memory, and a runner of DAG steps in child
processes.

Corpora. /usr/include (libstdc++ 12, glibc, Linux UAPI, the -dev packages installed here: ~7,900
usable files, ~110 MB) in a fixed shuffled order (seed 0), so every prefix has the same mix.
- JSONL: records {"text", "repo", "path"}; past the first pass over the files, copy n of a file gets a
  first line `// copy n of PATH` and `{ // vN` for each line-ending `{`, so whole-file docs and the
  chunks of split files differ between copies and dedupe keeps them (basic mode resolves no names,
  so copies of the same names change nothing else).
- Tree: each file once (no copies, so names are as unique as in real code), under a project named
  after its first directory under /usr/include (files directly in it: "libc"); extensionless
  libstdc++ headers (`vector`) get ".hpp" so the chunker's extension filter takes them.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from functools import lru_cache
from pathlib import Path

ROOT = Path("/usr/include")
MAX_FILE_BYTES = 500_000
SEED = 0
POLL_S = 0.02
PSS_EVERY = 5  # smaps_rollup costs more than status: read it every 5th poll


@lru_cache(maxsize=1)
def real_cpp_files() -> tuple[tuple[str, str], ...]:
    """(relative path, text) of every usable header under /usr/include, shuffled with a fixed seed."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not (name.endswith((".h", ".hpp", ".tcc", ".hh", ".c", ".cc", ".ipp"))
                                            or "." not in name and "/c++/" in path):
                continue
            data = Path(path).read_bytes()
            if not data.strip() or len(data) > MAX_FILE_BYTES or b"\0" in data:
                continue
            try:
                found.append((os.path.relpath(path, ROOT), data.decode("utf-8")))
            except UnicodeDecodeError:
                continue
    random.Random(SEED).shuffle(found)
    return tuple(found)


def _copy_text(rel: str, text: str, copy: int) -> str:
    if copy == 0:
        return text
    return f"// copy {copy} of {rel}\n" + text.replace("{\n", f"{{ // v{copy}\n")


def write_jsonl(path: Path, megabytes: float) -> tuple[int, int]:
    """Records of the shuffled files, cycled (copy n on the n-th pass) until the file holds `megabytes`
    MB; returns (records, bytes of text)."""
    files = real_cpp_files()
    limit = int(megabytes * 1e6)
    written = records = text_bytes = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < limit:
            rel, text = files[records % len(files)]
            copy = records // len(files)
            text = _copy_text(rel, text, copy)
            line = json.dumps({"text": text, "repo": f"copy{copy}", "path": rel}, ensure_ascii=False) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))
            text_bytes += len(text.encode("utf-8"))
            records += 1
    return records, text_bytes


def write_tree(root: Path, n_files: int) -> tuple[int, int]:
    """The first n_files shuffled files as project trees under root; returns (files, bytes)."""
    files = real_cpp_files()
    if n_files > len(files):
        raise ValueError(f"{n_files} files asked, {len(files)} usable under {ROOT}")
    total = 0
    for rel, text in files[:n_files]:
        parts = rel.split("/")
        if len(parts) == 1:
            parts = ["libc"] + parts
        if "." not in parts[-1]:
            parts[-1] += ".hpp"
        target = root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        target.write_bytes(data)
        total += len(data)
    return n_files, total


# ---------------------------------------------------------------- peak memory of a process tree

def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _descendants(root: int) -> list[int]:
    """root and every process below it (this kernel has no /proc/PID/task/TID/children: scan /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(parents.get(pid, ()))
    return tree


CHILD_PRELUDE = textwrap.dedent("""
    import json, sys
    def _vmhwm_kb():
        return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
    def _report(result):  # the last stdout line: this process's own exact peak and its result
        print("\\n" + json.dumps({"vmhwm_kb": _vmhwm_kb(), "result": result}, default=str), flush=True)
""")


def watch(argv: list[str], env: dict | None = None) -> dict:
    """Run argv (a Python child ending with _report) and watch its process tree until it exits.

    Returns seconds (wall), cpu_s (user + system seconds of the child and its workers), tree_peak_mb
    (the peak over time of the sum of VmHWM over the processes alive at that moment), proc_peak_mb
    (largest VmHWM of any one process), root_mb (the child's own VmHWM, exact: it reports it), workers
    (how many processes below it were seen), worker_peak_mb, pss_peak_mb (the peak of the sampled sum
    of Pss, shared pages counted once), and the child's result."""
    env = dict(os.environ, TQDM_DISABLE="1", **(env or {}))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        seen: dict[int, int] = {}
        tree_peak = pss_peak = polls = 0
        while True:
            # wait4, not Popen.poll: its rusage holds the CPU time of the child and of every process it
            # waited for (its pool workers), a figure other jobs on the machine do not inflate
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            tree = _descendants(proc.pid)
            alive = 0
            for pid in tree:
                kb = _status_kb(pid, "VmHWM:")
                if kb is not None:
                    seen[pid] = max(seen.get(pid, 0), kb)
                    alive += seen[pid]
            tree_peak = max(tree_peak, alive)
            if polls % PSS_EVERY == 0:
                pss_peak = max(pss_peak, sum(_pss_kb(pid) for pid in tree))
            polls += 1
            time.sleep(POLL_S)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {proc.returncode}: {stderr[-3000:]}")
    report = json.loads(stdout.strip().splitlines()[-1])
    root_kb = max(report["vmhwm_kb"], seen.get(proc.pid, 0))
    # the root's last reading may predate its exit by a poll: add what it grew since (conservative)
    tree_peak = max(tree_peak + root_kb - seen.get(proc.pid, root_kb), root_kb)
    return {"seconds": seconds, "cpu_s": usage.ru_utime + usage.ru_stime, "tree_peak_mb": tree_peak / 1024,
            "proc_peak_mb": max([root_kb, *seen.values()]) / 1024, "root_mb": root_kb / 1024,
            "workers": len(seen) - 1 if proc.pid in seen else len(seen),
            "worker_peak_mb": max([kb for pid, kb in seen.items() if pid != proc.pid] or [0]) / 1024,
            "pss_peak_mb": pss_peak / 1024, "result": report["result"]}


# ---------------------------------------------------------------- the DAG steps, one child process each

STEP_CHILD = CHILD_PRELUDE + textwrap.dedent("""
    from nanodata.jobs import cpp_corpus as cc
    step, arg, params = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    settings = {k: params[k] for k in ("mode", "max_tokens", "tokenizer")}
    if step == "plan":
        result = cc.plan(arg["source"], arg["dest"], params, partition_mb=arg["partition_mb"])
    elif step in ("parse_batch", "chunk_batch"):
        result = getattr(cc, step)(arg, **settings)
    elif step == "index":
        result = cc.index(arg)
    elif step == "merge":
        result = cc.merge(arg["stage"], arg["key"])
    else:
        raise SystemExit(f"unknown step {step}")
    _report(result)
""")


def step_argv(step: str, arg: dict, params: dict) -> list[str]:
    return [sys.executable, "-c", STEP_CHILD, step, json.dumps(arg), json.dumps(params)]


def params_for(mode: str, max_tokens: int = 2048) -> dict:
    return {"mode": mode, "max_tokens": max_tokens, "tokenizer": "cl100k_base", "rows_per_file": 8192,
            "val_fraction": 0.0}
