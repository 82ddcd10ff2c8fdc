"""Splitting a .jsonl.zst for mapped tasks: plan's one pass, what it stages, and one task's range.

On ~150 MB (decompressed) of chunker-like JSONL: `plan_partitions` at 10 MB partitions over the same data as
a .zst of 1 MB frames (as pzstd or the seekable format write them) and as one frame (what `zstd` writes):
wall time of the pass and bytes staged. Frames: each piece is read by its chunk task from its frame, nothing
staged. One frame: the first piece is read in place, every later one is decompressed into a part file, as
every piece was before. Then one task's middle partition read back (its items: what a chunk task streams).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import zstandard
from bench_parquet import write_chunker_like_jsonl

from nanodata.pipeline.chunkbuild import partitions as parts
from nanodata.storage.auth import load_secret

SIZE_MB = 150
PARTITION = 10 << 20
FRAME = 1 << 20
SECRET = load_secret()  # what seals the staged partitions (the user's, as `nanodata chunk --cache` uses)


def staged_bytes(stage: Path) -> int:
    return sum(p.stat().st_size for p in stage.rglob("*") if p.is_file() and "partitions" not in p.parts)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "docs.jsonl"
        write_chunker_like_jsonl(plain, SIZE_MB)
        data = plain.read_bytes()
        plain.unlink()
        compress = zstandard.ZstdCompressor(level=3).compress
        figures = {}
        for name, step in (("1 MB frames", FRAME), ("one frame", len(data))):
            zst = Path(tmp) / f"{step}.jsonl.zst"
            zst.write_bytes(b"".join(compress(data[i:i + step]) for i in range(0, len(data), step)))
            stage = Path(tmp) / f"stage-{step}"
            started = time.perf_counter()
            n, _ = parts.plan_partitions([{"kind": "jsonl", "uri": str(zst)}], str(stage), PARTITION, (".h",),
                                         secret=SECRET)
            plan_s = time.perf_counter() - started
            started = time.perf_counter()
            items = sum(1 for _ in parts.partition_items(parts.load_partition(str(stage), n // 2, SECRET), 500_000))
            figures[name] = (plan_s, staged_bytes(stage), time.perf_counter() - started)
            print(f"{name}: {zst.stat().st_size / 1e6:.0f} MB .zst, {len(data) / 1e6:.0f} MB decompressed, "
                  f"{n} partitions; plan {plan_s:.1f} s, staged {staged_bytes(stage) / 1e6:.1f} MB; partition "
                  f"{n // 2} read back ({items} items) in {figures[name][2]:.2f} s")
        (frames_s, frames_staged, frames_read), (one_s, one_staged, one_read) = figures.values()
        print(f"plan's pass, frames: measured {frames_s:.1f} s | before (every piece into a part file, as a one-frame "
              f".zst still is): {one_s:.1f} s: {frames_s / one_s:.2f}x")
        print(f"staged by plan, frames: measured {frames_staged / 1e6:.1f} MB | before: {one_staged / 1e6:.1f} MB "
              f"(the decompressed input less its first piece) | a task's range: {frames_read:.2f} s vs "
              f"{one_read:.2f} s from its part file: {frames_read / one_read:.2f}x")


if __name__ == "__main__":
    main()
