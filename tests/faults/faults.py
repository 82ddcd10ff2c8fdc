"""Fault injection for the CLI commands: kill -9 at seeded random moments, and a disk that fills up.

Each command runs as a real `nanodata` process. `kill_at` lets it run for a given time, then sends
SIGKILL to its whole process group (workers included). `run_on_small_disk` runs a shell command with a
small tmpfs mounted at a directory, in a private mount namespace (as root, or as any user through a user
namespace), so the full disk is the kernel's real ENOSPC and nothing leaks onto the host's mounts; what
the command left on the small disk is copied out for the test to inspect.
"""

from __future__ import annotations

import filecmp
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

NANODATA = str(Path(sys.executable).with_name("nanodata"))


def nanodata_cmd(*args) -> list[str]:
    return [NANODATA, *map(str, args)]


def run(cmd: list[str], timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def timed_run(cmd: list[str]) -> float:
    """Run cmd to completion (it must succeed); its wall time in seconds."""
    start = time.monotonic()
    done = run(cmd)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - start


def kill_at(cmd: list[str], after: float) -> int | None:
    """Start cmd, SIGKILL its process group `after` seconds later; its exit code if it finished first."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        return proc.wait(timeout=after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def kill_moments(seed: int, clean_seconds: float, count: int) -> list[float]:
    """`count` seeded moments spread over a clean run's duration (start-up included)."""
    rng = random.Random(seed)
    return [rng.uniform(0.05, 1.0) * clean_seconds for _ in range(count)]


def same_tree(a: Path, b: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """Names that differ between two directory trees (missing on one side or different bytes); [] if equal."""
    def names(root: Path) -> set[str]:
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()
                and not any(p.name.endswith(s) or p.name == s for s in ignore)}

    left, right = names(a), names(b)
    differ = sorted(left ^ right)
    differ += [n for n in sorted(left & right) if not filecmp.cmp(a / n, b / n, shallow=False)]
    return differ


def run_on_small_disk(shell_cmd: str, disk: Path, size: str, keep: Path, setup: str = "",
                      timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `shell_cmd` with a tmpfs of `size` (e.g. '256k') mounted at `disk`; copy what it left to `keep`.

    The command runs in `disk`; `setup` runs first there (e.g. to copy inputs there). The mount lives in a private mount
    namespace, so it disappears with the command and `disk` on the host is untouched. Past `timeout` seconds:
    subprocess.TimeoutExpired.
    """
    disk.mkdir(parents=True, exist_ok=True)
    keep.mkdir(parents=True, exist_ok=True)
    script = (f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(disk))} || exit 99\ncd {shlex.quote(str(disk))}\n{setup}\n"
              f"{shell_cmd}\nrc=$?\ncp -a {shlex.quote(str(disk))}/. {shlex.quote(str(keep))}/\nexit $rc")
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    done = subprocess.run([*unshare, "sh", "-c", script], capture_output=True, text=True, timeout=timeout)
    assert done.returncode != 99, f"could not mount a tmpfs: {done.stderr}"
    return done
