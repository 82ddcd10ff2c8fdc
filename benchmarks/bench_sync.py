"""nanodata sync: 200 shard files to a real gcp-storage-emulator process, --workers 8 vs --workers 1,
and the bytes a second run sends (must be 0: every object already matches by size and crc32c).

The emulator serves one request at a time on loopback, so this measures how much of the client's
per-file work (request setup, checksums, HTTP round trips) the workers overlap, not network latency;
against real GCS, where each request waits tens of ms, the gain from workers is larger.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import time
from pathlib import Path

from nanodata import corpus
from nanodata.testing.emulator import GcsEmulator

N_FILES = 200
FILE_BYTES = 256 * 1024
GOAL_SPEEDUP = 1.5  # the emulator answers one request at a time, which caps the gain


def make_corpus(root: Path) -> int:
    rng = random.Random(0)
    root.mkdir(parents=True)
    for i in range(N_FILES - 2):
        (root / f"shard_{i:05d}.parquet").write_bytes(rng.randbytes(FILE_BYTES))
    (root / "manifest.json").write_text('{"version": 1, "shards": []}')
    (root / "_COMPLETE").write_bytes(b"")
    return sum(p.stat().st_size for p in root.iterdir())


def timed_sync(src: Path, dst: str, workers: int) -> tuple[float, dict]:
    started = time.perf_counter()
    totals = corpus.sync(src, dst, workers=workers)
    return time.perf_counter() - started, totals


def upload_twice(src: Path, root: Path, workers: int) -> tuple[float, dict, float, dict]:
    """A fresh emulator per measurement: its metadata file grows with every object it holds."""
    with GcsEmulator(root=root) as emulator:
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.host
        emulator.create_bucket("bench")
        t_first, first = timed_sync(src, "gs://bench/corpus", workers)
        t_second, second = timed_sync(src, "gs://bench/corpus", workers)
    assert first["uploaded"] == N_FILES and first["failed"] == 0
    return t_first, first, t_second, second


def main() -> None:
    logging.getLogger("nanodata.storage").setLevel(logging.WARNING)
    os.environ["TQDM_DISABLE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "corpus"
        total = make_corpus(src)
        t1, _, _, _ = upload_twice(src, Path(tmp) / "gcs1", workers=1)
        t8, first, t_again, second = upload_twice(src, Path(tmp) / "gcs8", workers=8)
        print(f"sync upload {N_FILES} files ({total / 1e6:.1f} MB) to the emulator: measured {t8:.2f} s with "
              f"--workers 8 | reference {t1:.2f} s with --workers 1 | ratio {t1 / t8:.2f}x faster "
              f"(goal >= {GOAL_SPEEDUP})")
        print(f"sync second run: measured {second['bytes']} bytes sent, {second['skipped']} skipped in "
              f"{t_again:.2f} s | reference {first['bytes']} bytes on the first run | ratio "
              f"{second['bytes'] / first['bytes']:.2f} (goal = 0)")


if __name__ == "__main__":
    main()
