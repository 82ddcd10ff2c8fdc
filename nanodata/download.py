"""Download pretraining parquet shards over HTTP: retried, verified, atomic.

Each file streams to NAME.tmp, must parse as parquet (footer + metadata), then is renamed
into place, so the data dir only ever holds complete files. Files already present and
valid are skipped, which makes a re-run resume an interrupted download.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.parquet as pq
import requests
from tqdm import tqdm

from nanodata.errors import NanodataError

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "shard_{index:05d}.parquet"
CHUNK_BYTES = 1 << 20
# Client errors that another attempt cannot fix (408 timeout and 429 rate limit can be fixed by waiting).
PERMANENT_STATUS = frozenset(range(400, 500)) - {408, 429}
# Failures that mean no HTTP server answered at all.
UNREACHABLE_REASONS = frozenset({"host name does not resolve", "connection refused", "network unreachable"})


class HostUnreachable(NanodataError):
    """Every attempt failed before any HTTP response: offline, bad host name, nothing listening."""


def shard_name(index: int, name_template: str = DEFAULT_TEMPLATE) -> str:
    try:
        return name_template.format(index=index)
    except (KeyError, IndexError, ValueError) as exc:
        raise NanodataError(f"--name-template {name_template!r}: cannot format with index={index} ({exc}); "
                            f"use a field named 'index', e.g. 'shard_{{index:05d}}.parquet'") from None


def check_base_url(base_url: str) -> str:
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise NanodataError(f"--base-url must be an http(s) URL like https://host/path, not {base_url!r}")
    return base_url.rstrip("/")


def is_valid_parquet(path: Path) -> bool:
    try:
        pq.read_metadata(path)
        return True
    except Exception:  # pyarrow raises ArrowInvalid/OSError for truncated or foreign bytes
        return False


def describe_error(exc: Exception) -> str:
    """A short reason for a failed attempt: requests' messages nest several exceptions deep."""
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code} {exc.response.reason}"
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.ConnectionError):
        text = str(exc)
        for needle, reason in (("Failed to resolve", "host name does not resolve"),
                               ("Name or service not known", "host name does not resolve"),
                               ("Connection refused", "connection refused"),
                               ("IncompleteRead", "truncated body"),
                               ("RemoteDisconnected", "connection dropped"),
                               ("Connection aborted", "connection dropped"),
                               ("Connection reset", "connection reset"),
                               ("Network is unreachable", "network unreachable")):
            if needle in text:
                return reason
        return "connection failed"
    if isinstance(exc, requests.RequestException):  # ChunkedEncodingError, ContentDecodingError, ...
        return "truncated body" if "IncompleteRead" in str(exc) else type(exc).__name__
    return str(exc)


def _fetch(url: str, tmp: Path, timeout: float) -> None:
    """One attempt: stream the body to tmp and check it is parquet. Raises on any failure."""
    with requests.get(url, stream=True, timeout=timeout) as response:
        response.raise_for_status()
        with open(tmp, "wb") as f:
            for chunk in response.iter_content(CHUNK_BYTES):
                f.write(chunk)
    if not is_valid_parquet(tmp):
        raise ValueError("not a readable parquet file (truncated or wrong content)")


def download_single_file(index: int, base_url: str, data_dir: str | os.PathLike, *,
                         name_template: str = DEFAULT_TEMPLATE, attempts: int = 5, backoff_base: float = 2.0,
                         timeout: float = 30.0) -> Path:
    """Download shard `index` to data_dir unless a valid copy is there; returns its path.

    Attempt k (1-based) that fails waits backoff_base**k seconds before the next one (2, 4, 8, 16 s).
    Raises NanodataError naming the file after the last attempt (HostUnreachable if no attempt
    ever got an HTTP response).
    """
    if attempts < 1:
        raise NanodataError(f"--attempts must be >= 1, not {attempts}")
    name = shard_name(index, name_template)
    url = f"{check_base_url(base_url)}/{name}"
    data_dir = Path(data_dir)
    path = data_dir / name
    if path.is_file() and is_valid_parquet(path):
        log.debug("%s: present and valid, skipped", name)
        return path
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(name + ".tmp")
    reasons = []
    try:
        for attempt in range(1, attempts + 1):
            try:
                _fetch(url, tmp, timeout)
                os.replace(tmp, path)
                return path
            except (requests.RequestException, ValueError, OSError) as exc:
                reasons.append(describe_error(exc))
                tmp.unlink(missing_ok=True)
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if status in PERMANENT_STATUS:
                    break
                log.debug("%s: attempt %d/%d failed: %s", name, attempt, attempts, reasons[-1])
                if attempt < attempts:
                    time.sleep(backoff_base ** attempt)
    finally:
        tmp.unlink(missing_ok=True)  # also on KeyboardInterrupt: never leave a partial behind
    if all(r in UNREACHABLE_REASONS for r in reasons):
        raise HostUnreachable(f"cannot reach {urlsplit(url).netloc}: {reasons[-1]} ({name} not downloaded)")
    raise NanodataError(f"{name}: failed after {len(reasons)} attempt(s) ({reasons[-1]}) from {url}")


def download_shards(base_url: str, num_shards: int, data_dir: str | os.PathLike, *, workers: int = 4,
                    name_template: str = DEFAULT_TEMPLATE, attempts: int = 5, backoff_base: float = 2.0,
                    timeout: float = 30.0, progress: bool = True) -> dict:
    """Download shards 0..num_shards-1 in parallel threads; every shard is tried even if others fail.

    Returns {"downloaded": [names], "skipped": [names], "failed": {name: reason}, "unreachable": bool,
    "seconds": float}. Once the host proves unreachable, shards not yet started fail at once
    instead of each waiting out its own retries.
    """
    if num_shards < 0:
        raise NanodataError(f"--num-shards must be >= 0, not {num_shards}")
    if workers < 1 or attempts < 1:
        raise NanodataError(f"--workers and --attempts must be >= 1, not {workers} and {attempts}")
    check_base_url(base_url)
    data_dir = Path(data_dir)
    names = [shard_name(i, name_template) for i in range(num_shards)]
    for name in names:  # partials left by a crashed run
        (data_dir / (name + ".tmp")).unlink(missing_ok=True)
    present = {n for n in names if (data_dir / n).is_file() and is_valid_parquet(data_dir / n)}
    host_down = threading.Event()
    result = {"downloaded": [], "skipped": sorted(present), "failed": {}, "unreachable": False}

    def fetch_one(index: int) -> Path:
        if host_down.is_set():
            raise HostUnreachable(f"{names[index]}: not attempted, host unreachable")
        try:
            return download_single_file(index, base_url, data_dir, name_template=name_template,
                                        attempts=attempts, backoff_base=backoff_base, timeout=timeout)
        except HostUnreachable:
            host_down.set()
            raise

    start = time.perf_counter()
    todo = [i for i, n in enumerate(names) if n not in present]
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=num_shards, initial=len(present), unit="shard", disable=not progress,
                 desc="download") as bar:
        futures = {pool.submit(fetch_one, i): names[i] for i in todo}
        for future in as_completed(futures):
            name = futures[future]
            try:
                future.result()
                result["downloaded"].append(name)
            except NanodataError as exc:
                result["failed"][name] = str(exc)
            bar.update(1)
    result["downloaded"].sort()
    result["failed"] = dict(sorted(result["failed"].items()))
    result["unreachable"] = host_down.is_set()
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


EPILOG = """\
Each file streams to NAME.tmp, must parse as parquet, then is renamed into place; files already
present and valid are skipped, so re-running resumes. Exits non-zero naming every file that failed.

example (nanochat's FineWeb-Edu shards):
  nanodata download --num-shards 8 --workers 4 --dir data/base_data \\
    --base-url https://huggingface.co/datasets/karpathy/fineweb-edu-100b-shuffle/resolve/main"""


def configure_parser(parser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--base-url", required=True,
                        help="URL of the directory holding the shards; file URL = BASE_URL/NAME")
    parser.add_argument("--num-shards", type=int, required=True, help="download shards 0..N-1")
    parser.add_argument("--dir", type=Path, default=None,
                        help="destination dir (default: $NANODATA_DATA_DIR or ~/.cache/nanodata/base_data)")
    parser.add_argument("--workers", type=int, default=4, help="parallel downloads (default: 4)")
    parser.add_argument("--name-template", default=DEFAULT_TEMPLATE,
                        help="file name of shard {index}, Python format syntax (default: %(default)s)")
    parser.add_argument("--attempts", type=int, default=5, help="tries per file (default: 5)")
    parser.add_argument("--backoff-base", type=float, default=2.0,
                        help="wait BASE**k seconds after failed attempt k: 2, 4, 8, 16 s (default: 2)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds without data before an attempt "
                                                                    "fails (default: 30)")


def run(args) -> int:
    from nanodata.dataset import default_data_dir

    data_dir = args.dir if args.dir is not None else default_data_dir()
    result = download_shards(args.base_url, args.num_shards, data_dir, workers=args.workers,
                             name_template=args.name_template, attempts=args.attempts,
                             backoff_base=args.backoff_base, timeout=args.timeout)
    print(f"download: {len(result['downloaded'])} downloaded, {len(result['skipped'])} already present, "
          f"{len(result['failed'])} failed -> {data_dir}")
    if result["unreachable"]:
        reason = next(r for r in result["failed"].values() if r.startswith("cannot reach"))
        raise NanodataError(f"{reason}; {len(result['failed'])} shard(s) not downloaded (offline?)")
    if result["failed"]:
        for reason in result["failed"].values():
            print(f"  failed: {reason}", file=sys.stderr)
        raise NanodataError(f"{len(result['failed'])} of {args.num_shards} shard(s) failed: "
                            + ", ".join(result["failed"]))
    return 0
