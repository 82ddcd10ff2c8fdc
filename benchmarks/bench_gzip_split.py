"""Splitting a .jsonl.gz for mapped tasks: one pass that yields a seek index, then a range read per task.

On ~150 MB (decompressed) of chunker-like JSONL, gzip level 6: wall time of a full pass with Python's
gzip (what plan did before: decompress everything, serially), with rapidgzip at 1 and at all cores
(exporting its seek index), and with indexed_gzip (building its full index) when installed; then the
time to read a 10 MB range from the middle through each index (what one chunk task does). nanodata uses
rapidgzip (pinned in pyproject.toml / requirements.lock); indexed_gzip is only compared here
(`pip install indexed_gzip==1.10.3`). Wall times: run on a quiet machine for figures to quote.
"""

from __future__ import annotations

import gzip
import io
import os
import tempfile
import time
from pathlib import Path

from bench_parquet import write_chunker_like_jsonl

SIZE_MB = 150
RANGE = 10 << 20


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def drain(f) -> int:
    n = 0
    while block := f.read(1 << 20):
        n += len(block)
    return n


def main() -> None:
    import rapidgzip

    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "docs.jsonl"
        write_chunker_like_jsonl(plain, SIZE_MB)
        gz = Path(tmp) / "docs.jsonl.gz"
        with open(plain, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            while block := src.read(1 << 20):
                dst.write(block)
        size = plain.stat().st_size
        middle = size // 2
        plain.unlink()
        print(f"input: {gz.stat().st_size / 1e6:.0f} MB .gz, {size / 1e6:.0f} MB decompressed, {cores} cores")

        seconds, _ = timed(lambda: drain(gzip.open(gz, "rb")))
        print(f"full pass, gzip (serial, the old plan): {seconds:.1f} s ({size / seconds / 1e6:.0f} MB/s)")
        for parallel in sorted({1, cores}):
            index = Path(tmp) / f"rapid{parallel}.gzidx"

            def rapid_pass(parallel=parallel, index=index):
                with rapidgzip.RapidgzipFile(open(gz, "rb"), parallelization=parallel) as f:
                    drain(f)
                    with open(index, "wb") as out:
                        f.export_index(out)

            seconds, _ = timed(rapid_pass)
            print(f"full pass + seek index, rapidgzip parallelization={parallel}: {seconds:.1f} s "
                  f"({size / seconds / 1e6:.0f} MB/s), index {index.stat().st_size / 1e6:.1f} MB")

        def rapid_range():
            with rapidgzip.RapidgzipFile(open(gz, "rb"), parallelization=1) as f, open(index, "rb") as idx:
                f.import_index(idx)
                f.seek(middle)
                return len(f.read(RANGE))

        seconds, _ = timed(rapid_range)
        print(f"10 MB range from the middle via the index, rapidgzip: {seconds:.2f} s")
        try:
            import indexed_gzip
        except ImportError:
            print("indexed_gzip: not installed (pip install indexed_gzip==1.10.3 to compare)")
            return
        index = Path(tmp) / "igzip.gzidx"

        def igzip_pass():
            with indexed_gzip.IndexedGzipFile(str(gz), spacing=4 << 20) as f:
                f.build_full_index()
                f.export_index(str(index))

        seconds, _ = timed(igzip_pass)
        print(f"full index, indexed_gzip (serial): {seconds:.1f} s ({size / seconds / 1e6:.0f} MB/s), "
              f"index {index.stat().st_size / 1e6:.1f} MB")

        def igzip_range():
            with indexed_gzip.IndexedGzipFile(str(gz)) as f:
                f.import_index(str(index))
                f.seek(middle)
                return len(io.BufferedReader(f).read(RANGE))

        seconds, _ = timed(igzip_range)
        print(f"10 MB range from the middle via the index, indexed_gzip: {seconds:.2f} s")


if __name__ == "__main__":
    main()
