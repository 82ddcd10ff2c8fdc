"""Run every benchmarks/bench_*.py main() in turn; each prints its figure next to its reference."""

import importlib.util
import sys
import time
from pathlib import Path


def main() -> int:
    failed = []
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        print(f"\n=== {path.stem} ===", flush=True)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        started = time.perf_counter()
        try:
            spec.loader.exec_module(module)
            module.main()
        except Exception as exc:  # keep going: one broken benchmark must not hide the others' figures
            print(f"{path.stem}: FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed.append(path.stem)
        print(f"({path.stem} took {time.perf_counter() - started:.1f} s)", flush=True)
    if failed:
        print(f"\nfailed benchmarks: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
