"""The shutdown fault suite: a trainer process (gcs_exit_child.py) iterates the gs:// loader against a real emulator
process, which is SIGKILLed at a seeded random point: during the first read, mid-iteration, during a resume, or
after iterating and before the trainer exits; the loader not closed, closed, or used as a context manager.

Each run must end within HANG_S of the kill, with status 0 or 3 (the loader's one NanodataError), and without
`terminate called`, a traceback or an "Exception ignored" on stderr (retry warnings are expected). `python tests/loader/gcs_exit.py RUNS_PER_CASE [SEED]` runs the full suite
(`make faults`) and prints its figures; tests/loader/test_gcs_loader_shutdown.py runs a few in `make test`.
"""

from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # run as a script too (make faults)

from corpus import write_corpus  # noqa: E402
from support.gcs_emulator import emulator_env  # noqa: E402

from nanodata import corpus  # noqa: E402
from nanodata.testing.emulator import GcsEmulator  # noqa: E402

CASES = ("open", "closed", "with")
PHASES = ("first-read", "mid", "resume", "before-exit")
HANG_S = 30.0
STARTUP_S = 120.0  # a child importing torch on a busy 2-core machine
BUCKET = "shutdown-faults"


@dataclass
class Outcome:
    case: str
    phase: str
    seed: int
    status: int | None  # None: still running HANG_S after the kill (a hang; then killed)
    exit_s: float  # from the kill of the emulator to the child's exit
    stderr: str

    @property
    def hung(self) -> bool:
        return self.status is None

    @property
    def aborted(self) -> bool:
        return "terminate called" in self.stderr or (self.status is not None and self.status < 0)

    @property
    def ok(self) -> bool:
        return (not self.hung and not self.aborted and self.status in (0, 3) and "Traceback" not in self.stderr
                and "Exception ignored" not in self.stderr and (self.status == 0 or "NanodataError: " in self.stderr))


class Bucket:
    """A corpus in an emulator's data directory, and a resume state of it: each run starts its own emulator on it."""

    def __init__(self, root: Path):
        self.root = root
        self.uri = f"gs://{BUCKET}/corpus"
        self.state_file = root / "state.json"
        local = root / "local"
        write_corpus(local, n_files=4, docs_per_file=60, row_group_size=8)  # 3 train files of 8 row groups
        with GcsEmulator(root=root / "emulator") as emulator, env(**emulator_env(emulator)):
            emulator.create_bucket(BUCKET)
            corpus.sync(local, self.uri)
            self.state_file.write_text(json.dumps(first_state(self.uri)))


def first_state(uri: str) -> dict:
    from nanodata.loader import tokenizing_distributed_data_loader_with_state_bos_bestfit as bestfit
    from nanodata.tokenizer import load

    with bestfit(load("cl100k_base"), 2, 64, "train", data_dir=uri, device="cpu", tokenizer_batch_size=8,
                 buffer_size=30) as loader:
        for _ in range(5):
            _, _, state = next(loader)
    return state


class env:
    def __init__(self, **values):
        self.values, self.saved = values, {}

    def __enter__(self):
        self.saved = {k: os.environ.get(k) for k in self.values}
        os.environ.update(self.values)

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def run_once(bucket: Bucket, case: str, phase: str, seed: int) -> Outcome:
    rng = random.Random(seed)
    trigger = {"first-read": "start", "resume": "start", "before-exit": "done",
               "mid": f"batch {rng.randint(1, 6)}"}[phase]
    delay = rng.uniform(0, 1.0) if phase in ("first-read", "resume") else rng.uniform(0, 0.05)
    emulator = GcsEmulator(root=bucket.root / "emulator").start()
    stderr = tempfile.TemporaryFile()
    child_env = {**os.environ, **emulator_env(emulator),
                 # NANODATA_FAULT_CODE: another checkout's root, to measure that version of the loader the same way
                 "PYTHONPATH": os.pathsep.join([os.environ.get("NANODATA_FAULT_CODE", str(HERE.parents[1])),
                                                os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, str(HERE / "gcs_exit_child.py"), bucket.uri, case, phase,
                              str(bucket.state_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=stderr, env=child_env, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in child.stdout] + [lines.put(None)],
                     daemon=True).start()
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:  # up to the kill point, or the child's end before it
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None or line == trigger:
                break
        time.sleep(delay)
        emulator.kill()
        killed = time.monotonic()
        if phase == "before-exit":
            try:
                child.stdin.write("\n")
                child.stdin.flush()
            except OSError:  # it ended already
                pass
        try:
            status = child.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            status = None
            child.kill()
            child.wait()
        exit_s = time.monotonic() - killed
    finally:
        emulator.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    stderr.seek(0)
    return Outcome(case, phase, seed, status, exit_s, stderr.read().decode(errors="replace"))


def run_suite(bucket: Bucket, runs_per_case: int, seed: int = 0, report=print, cases=CASES) -> list[Outcome]:
    """runs_per_case runs of each case, spread evenly over the phases; seeds derived from `seed`."""
    outcomes = []
    for case in cases:
        for i in range(runs_per_case):
            phase = PHASES[i % len(PHASES)]
            outcome = run_once(bucket, case, phase, seed * 100_000 + CASES.index(case) * 1000 + i)
            outcomes.append(outcome)
            report(f"{case:6} {phase:11} seed {outcome.seed:6}: status {outcome.status}, exit {outcome.exit_s:5.2f} s"
                   + ("" if outcome.ok else f"  BAD: {outcome.stderr[-400:]!r}"))
    return outcomes


def figures(outcomes: list[Outcome]) -> str:
    by_status: dict = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    return (f"{len(outcomes)} runs, {sum(o.hung for o in outcomes)} hangs, {sum(o.aborted for o in outcomes)} "
            f"aborts, {sum(not o.ok for o in outcomes)} bad; worst exit {max(o.exit_s for o in outcomes):.2f} s; "
            f"statuses {dict(sorted(by_status.items(), key=str))}")


if __name__ == "__main__":
    runs, seed = int(sys.argv[1]) if len(sys.argv) > 1 else 32, int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with tempfile.TemporaryDirectory(prefix="nanodata-shutdown-") as tmp:
        cases = os.environ.get("NANODATA_FAULT_CASES", ",".join(CASES)).split(",")
        results = run_suite(Bucket(Path(tmp)), runs, seed, cases=cases)
    print(figures(results))
    sys.exit(0 if all(o.ok for o in results) else 1)
