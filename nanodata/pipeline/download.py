"""Download pretraining parquet shards over HTTP: retried, verified, atomic.

Each file streams to NAME.tmp, must parse as parquet (footer + metadata), then is renamed
into place, so the data dir only ever holds complete files. Files already present and
valid are skipped, which makes a re-run resume an interrupted download. Retries follow the
one policy of nanodata.storage.retry (the one GCS uses too); a full disk stops the download
with one line naming the file.
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
from nanodata.ranges import ATTEMPTS, BACKOFF_S, NUM_SHARDS, THREAD_WORKERS, TIMEOUT_S, flag, local_path
from nanodata.storage.files import check_output_dir, temp_name
from nanodata.storage.retry import CorruptTransfer, check_range, check_retry_args, land, with_retries

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "shard_{index:05d}.parquet"
CHUNK_BYTES = 1 << 20
# Failures that mean no HTTP server answered at all.
UNREACHABLE_REASONS = frozenset({"host name does not resolve", "connection refused", "network unreachable"})


class FetchFailed(NanodataError):
    """One file was not downloaded: a permanent HTTP status, or every attempt failed."""


class HostUnreachable(FetchFailed):
    """The last attempt failed before any HTTP response: offline, bad host name, nothing listening."""


def shard_name(index: int, name_template: str = DEFAULT_TEMPLATE) -> str:
    """The file name of shard `index`: a plain name (no directory part), or a NanodataError naming the template."""
    try:
        name = name_template.format(index=index)
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        raise NanodataError(f"--name-template {name_template!r}: cannot format with index={index} ({exc}); "
                            f"use a field named 'index', e.g. 'shard_{{index:05d}}.parquet'") from None
    if (name in ("", ".", "..") or "/" in name or "\\" in name or not name.isprintable()
            or len(name.encode()) > 255):
        raise NanodataError(f"--name-template {name_template!r} must give a plain file name, not {name!r}")
    return name


def shard_names(num_shards: int, name_template: str = DEFAULT_TEMPLATE) -> list[str]:
    """Names of shards 0..num_shards-1, all distinct: a template without {index} would write every shard to one file."""
    names, seen = [], set()
    for index in range(num_shards):
        name = shard_name(index, name_template)
        if name in seen:
            raise NanodataError(f"--name-template {name_template!r} gives two shards the name {name!r}; "
                                f"include the field {{index}}, e.g. 'shard_{{index:05d}}.parquet'")
        seen.add(name)
        names.append(name)
    return names


def check_base_url(base_url: str) -> str:
    try:
        parts = urlsplit(base_url)
        _ = parts.port  # a port that is not a number raises here, not in every worker's request
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not base_url.isprintable():
        raise NanodataError(f"--base-url must be an http(s) URL like https://host/path, not {base_url!r}")
    return base_url.rstrip("/")


def check_fetch_args(base_url: str, name_template: str, attempts: int, backoff_base: float, timeout: float) -> None:
    check_base_url(base_url)
    shard_name(0, name_template)
    check_retry_args(attempts, backoff_base, backoff_flag="--backoff-base")
    TIMEOUT_S.check("--timeout", timeout)


def is_valid_parquet(path: Path) -> bool:
    try:
        pq.read_metadata(path)
        return True
    except Exception:  # pyarrow raises ArrowInvalid/OSError for truncated or foreign bytes
        return False


def check_parquet(path: Path) -> None:
    if not is_valid_parquet(path):
        raise CorruptTransfer("not a readable parquet file (truncated or wrong content)")


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


def fetch(url: str, path: Path, *, attempts: int = 5, backoff: float = 2.0, timeout: float = 30.0,
          verify=check_parquet) -> None:
    """GET url into path under the one retry policy: each attempt streams the body to path's temp file,
    verify(tmp) checks it, then it is committed. Raises FetchFailed (HostUnreachable) naming the file after
    a permanent HTTP status or the last attempt; a full disk is a NanodataError at once."""
    tries = 0

    def attempt() -> None:
        nonlocal tries
        tries += 1
        with requests.get(url, stream=True, timeout=timeout) as response:
            response.raise_for_status()

            def fill(f) -> None:
                for chunk in response.iter_content(CHUNK_BYTES):
                    f.write(chunk)

            land(path, fill, verify)

    try:
        with_retries(attempt, path.name, attempts, backoff)
    except (requests.RequestException, CorruptTransfer) as exc:
        reason = describe_error(exc)
        if reason in UNREACHABLE_REASONS:
            raise HostUnreachable(f"cannot reach {urlsplit(url).netloc}: {reason} "
                                  f"({path.name} not downloaded)") from None
        raise FetchFailed(f"{path.name}: failed after {tries} attempt(s) ({reason}) from {url}") from None


def download_single_file(index: int, base_url: str, data_dir: str | os.PathLike, *,
                         name_template: str = DEFAULT_TEMPLATE, attempts: int = 5, backoff_base: float = 2.0,
                         timeout: float = 30.0) -> Path:
    """Download shard `index` to data_dir unless a valid copy is there; returns its path.

    A failed attempt k (1-based) waits a random time up to backoff_base * 2**(k-1) seconds (at most 30)
    before the next one: up to 2, 4, 8, 16 s by default. Raises FetchFailed naming the file after the
    last attempt (HostUnreachable if the host did not answer at all).
    """
    check_fetch_args(base_url, name_template, attempts, backoff_base, timeout)
    name = shard_name(index, name_template)
    path = Path(data_dir) / name
    if path.is_file() and is_valid_parquet(path):
        log.debug("%s: present and valid, skipped", name)
        return path
    fetch(f"{check_base_url(base_url)}/{name}", path, attempts=attempts, backoff=backoff_base, timeout=timeout)
    return path


def download_shards(base_url: str, num_shards: int, data_dir: str | os.PathLike, *, workers: int = 4,
                    name_template: str = DEFAULT_TEMPLATE, attempts: int = 5, backoff_base: float = 2.0,
                    timeout: float = 30.0, progress: bool = True) -> dict:
    """Download shards 0..num_shards-1 in parallel threads; every shard is tried even if others fail.

    Returns {"downloaded": [names], "skipped": [names], "failed": {name: reason}, "unreachable": bool,
    "seconds": float}. Once the host proves unreachable, shards not yet started fail at once
    instead of each waiting out its own retries. An error no other shard can escape (a full disk)
    stops the download and is raised.
    """
    check_range("--num-shards", num_shards, 0, NUM_SHARDS.hi)
    THREAD_WORKERS.check("--workers", workers)
    check_fetch_args(base_url, name_template, attempts, backoff_base, timeout)
    data_dir = Path(data_dir)
    check_output_dir(data_dir, "--dir")
    names = shard_names(num_shards, name_template)
    for name in names:  # partials left by a crashed run
        temp_name(data_dir / name).unlink(missing_ok=True)
    present = {n for n in names if (data_dir / n).is_file() and is_valid_parquet(data_dir / n)}
    host_down, stopping = threading.Event(), threading.Event()
    result = {"downloaded": [], "skipped": sorted(present), "failed": {}, "unreachable": False}

    def fetch_one(index: int) -> Path | None:
        if stopping.is_set():
            return None  # not attempted: the download is stopping
        if host_down.is_set():
            raise HostUnreachable(f"{names[index]}: not attempted, host unreachable")
        try:
            return download_single_file(index, base_url, data_dir, name_template=name_template,
                                        attempts=attempts, backoff_base=backoff_base, timeout=timeout)
        except HostUnreachable:
            host_down.set()
            raise
        except FetchFailed:
            raise
        except NanodataError:  # a full disk: no other shard can fare better
            stopping.set()
            raise

    start = time.perf_counter()
    todo = [i for i, n in enumerate(names) if n not in present]
    with ThreadPoolExecutor(max_workers=workers) as pool, \
            tqdm(total=num_shards, initial=len(present), unit="shard", disable=None if progress else True,
                 desc="download") as bar:  # None: no bar when stderr is not a terminal (logs, Airflow)
        futures = {pool.submit(fetch_one, i): names[i] for i in todo}
        for future in as_completed(futures):  # a stopping error propagates; the shards left return at once
            name = futures[future]
            try:
                if future.result() is not None:
                    result["downloaded"].append(name)
            except FetchFailed as exc:
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
    parser.add_argument("--num-shards", type=flag(NUM_SHARDS), required=True, help="download shards 0..N-1")
    parser.add_argument("--dir", type=local_path(), default=None,
                        help="destination dir (default: $NANODATA_DATA_DIR or ~/.cache/nanodata/base_data)")
    parser.add_argument("--workers", type=flag(THREAD_WORKERS), default=4, help="parallel downloads (default: 4)")
    parser.add_argument("--name-template", default=DEFAULT_TEMPLATE,
                        help="file name of shard {index}, Python format syntax (default: %(default)s)")
    parser.add_argument("--attempts", type=flag(ATTEMPTS), default=5, help="tries per file (default: 5)")
    parser.add_argument("--backoff-base", type=flag(BACKOFF_S), default=2.0,
                        help="the first retry waits up to BASE seconds, doubling per retry (2, 4, 8, 16 s), at "
                             "most 30, randomized (default: 2)")
    parser.add_argument("--timeout", type=flag(TIMEOUT_S), default=30.0, help="seconds without data before an attempt "
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
