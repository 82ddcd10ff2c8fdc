"""Copy a corpus between a local directory and gs://bucket/prefix: ordered, idempotent, verified.

The storage layer moves files (nanodata.storage.sides); this module knows what a corpus is made of.

The published upload/download loops polled with `gcloud storage cp` and could exit after the
sentinel while a shard that landed between two listings was never copied. Here:
- data files go first (in parallel), then `manifest.json`, then `_COMPLETE`, and the sentinel
  is copied only if nothing failed and every file the manifest names is at the destination;
- `--watch` keeps syncing until it sees the source's `_COMPLETE`, then lists once more;
- a file whose size and crc32c already match at the destination is skipped, so a re-run
  after any failure copies exactly what is missing;
- downloads land in `name.tmp`, are checked against the object's crc32c, then renamed;
- every GCS call runs under the one retry policy (nanodata.storage.retry), and a full local disk stops the sync
  with one line naming the file (never retried, nothing partial under a final name).
Writers' work files (`*.tmp`, `_*` such as `_progress.json`; `_COMPLETE` excepted) are not copied.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nanodata.corpus.layout import COMPLETE, MANIFEST, Manifest
from nanodata.errors import NanodataError
from nanodata.ranges import ATTEMPTS, BACKOFF_S, DEADLINE_S, POLL_INTERVAL_S, THREAD_WORKERS, flag
from nanodata.storage.retry import check_range, check_retry_args, one_line, with_retries
from nanodata.storage.sides import Entry, GcsSide, LocalSide, open_side, safe_relative_name
from nanodata.storage.uri import is_gcs, read_bytes

log = logging.getLogger(__name__)


def copy_one(src, dst, name: str, listed: Entry, attempts: int = 5, backoff: float = 0.5,
             deadline: float | None = None) -> Entry:
    """Copy one file under the one retry policy; returns the version copied (size, crc32c)."""
    def attempt() -> Entry:
        if isinstance(dst, GcsSide):
            entry = src.entry(name)  # as the file is now: a writer may have finished it since the listing
            dst.send(name, src.path(name), entry)
        else:
            entry = listed
            dst.receive(name, entry, lambda f: src.read_into(name, f))
        return entry

    return with_retries(attempt, f"{src.uri}/{name} -> {dst.uri}/{name}", attempts, backoff, deadline)


class _Run:
    """One sync run's state across watch passes: what it has handled and the running totals."""

    def __init__(self, src, dst, workers: int, delete: bool, retry: dict):
        self.src, self.dst, self.workers, self.delete, self.retry = src, dst, workers, delete, retry
        self.done: dict[str, Entry] = {}  # names this run copied or found matching, with the version seen
        self.failing: set[str] = set()  # names whose latest attempt failed (a later watch pass may fix them)
        self.totals = {"uploaded": 0, "bytes": 0, "skipped": 0, "deleted": 0}

    def transfer(self, names: list[str], listing: dict[str, Entry], dst_listing: dict[str, Entry]) -> int:
        """Copy `names` in parallel; returns how many failed."""
        todo = []
        for name in names:
            entry = listing[name]
            if self.done.get(name) == entry:
                continue  # handled in an earlier watch pass
            if dst_listing.get(name) == entry:
                self.totals["skipped"] += 1
                self.done[name] = entry
                self.failing.discard(name)
            else:
                todo.append(name)
        if not todo:
            return 0

        stopping = threading.Event()

        def one(name: str):
            if stopping.is_set():
                return name, None  # not attempted: the sync is stopping
            try:
                return name, copy_one(self.src, self.dst, name, listing[name], **self.retry)
            except NanodataError:
                stopping.set()  # no other file can fare better (a full disk, a hostile name)
                raise
            except Exception as exc:
                return name, exc

        from tqdm import tqdm

        failed = 0
        with ThreadPoolExecutor(max(1, min(self.workers, len(todo)))) as pool:
            for name, outcome in tqdm(pool.map(one, todo), total=len(todo), desc="sync", unit="file",
                                      disable=None, leave=False):  # a stopping error propagates from here
                if isinstance(outcome, Entry):
                    self.done[name] = outcome
                    self.failing.discard(name)
                    self.totals["uploaded"] += 1
                    self.totals["bytes"] += outcome.size
                elif outcome is not None:
                    failed += 1
                    self.failing.add(name)
                    log.error("sync %s: not copied: %s", name, one_line(outcome))
        return failed

    def run_pass(self, listing: dict[str, Entry], final: bool) -> None:
        self.failing &= set(listing)  # a file that failed and then vanished from the source is not owed
        if isinstance(self.src, GcsSide):  # refuse a hostile listing before writing anything
            for name in listing:
                safe_relative_name(name, self.src.uri)
        dst_listing = self.dst.list()
        data = [n for n in listing if n not in (MANIFEST, COMPLETE)]
        failed = self.transfer(data, listing, dst_listing)
        if not final:
            return
        if self.delete:
            for name in sorted(set(dst_listing) - set(listing)):
                self.dst.delete(name)
                self.totals["deleted"] += 1
        if MANIFEST in listing:
            failed += self.transfer([MANIFEST], listing, dst_listing)
        if COMPLETE in listing:
            missing = self._missing_from_manifest()
            self.failing.update(missing)
            if failed or missing:
                log.error("sync: not copying %s: %d transfer(s) failed; named in %s but missing: %s",
                          COMPLETE, failed, MANIFEST, missing[:5])
            else:
                self.transfer([COMPLETE], listing, dst_listing)

    def _missing_from_manifest(self) -> list[str]:
        if MANIFEST not in self.done:
            return []
        try:
            manifest = Manifest.from_bytes(read_bytes(f"{self.dst.uri}/{MANIFEST}") or b"{}")
        except NanodataError as exc:
            log.warning("sync: not checking the files %s names: %s", MANIFEST, exc)
            return []
        present = self.dst.list()
        return [entry.name for entry in manifest.files if entry.name not in present]


def check_sync_args(src, dst, workers, watch, poll_interval, attempts, backoff, deadline) -> None:
    """Every argument of a sync, before any work: one line naming the parameter and its value."""
    src_side, dst_side = open_side(src), open_side(dst)  # malformed gs:// URIs and bucket names
    if isinstance(src_side, GcsSide) and isinstance(dst_side, GcsSide):
        raise NanodataError(f"{src} -> {dst}: one side of a sync must be a local directory")
    if isinstance(src_side, LocalSide) and not src_side.root.is_dir() and (src_side.root.exists() or not watch):
        raise NanodataError(f"{src}: source directory does not exist"
                            + (" (it is a file)" if src_side.root.exists() else ""))
    if isinstance(dst_side, LocalSide) and dst_side.root.exists() and not dst_side.root.is_dir():
        raise NanodataError(f"{dst}: destination is a file, not a directory")
    THREAD_WORKERS.check("--workers", workers)
    check_range("--poll-interval", poll_interval, 0, above=True)
    check_retry_args(attempts, backoff, deadline)


def sync(src: str | os.PathLike, dst: str | os.PathLike, *, workers: int = 8, watch: bool = False,
         delete: bool = False, poll_interval: float = 5.0, attempts: int = 5, backoff: float = 0.5,
         deadline: float | None = None) -> dict:
    """Copy every finished file of SRC to DST (see module doc). `attempts`, `backoff` (first wait, doubling)
    and `deadline` (seconds) set the retry policy per file. Returns the totals:
    {"uploaded", "bytes", "skipped", "failed", "deleted", "failed_names", "passes", "complete", "seconds"}."""
    src, dst = os.fspath(src), os.fspath(dst)
    check_sync_args(src, dst, workers, watch, poll_interval, attempts, backoff, deadline)
    started = time.perf_counter()
    retry = {"attempts": attempts, "backoff": backoff, "deadline": deadline}
    run = _Run(open_side(src, retry), open_side(dst, retry), workers, delete, retry)
    passes = 0
    while True:
        listing = run.src.list()
        complete = COMPLETE in listing
        if complete:
            # the sentinel is written last: one more listing catches files that landed while this one was taken
            listing = run.src.list()
        passes += 1
        run.run_pass(listing, final=complete or not watch)
        if complete or not watch:
            break
        time.sleep(poll_interval)
    totals = dict(run.totals, failed=len(run.failing), failed_names=sorted(run.failing), passes=passes,
                  complete=COMPLETE in run.done, seconds=round(time.perf_counter() - started, 3))
    log.info("sync %s -> %s: %s", src, dst, summary_line(totals))
    return totals


def summary_line(totals: dict) -> str:
    return (f"uploaded {totals['uploaded']} files ({totals['bytes']} bytes), "
            f"skipped {totals['skipped']}, failed {totals['failed']}")


def fetch_dir(uri: str, local: Path) -> Path:
    """A local directory holding uri's files: uri itself when local, else a copy in `local`."""
    if not is_gcs(uri):
        return Path(uri)
    local.mkdir(parents=True, exist_ok=True)
    _check(sync(uri, str(local)), uri)
    return local


def put_dir(local: Path, uri: str) -> dict:
    """Copy a local dir to uri; files already there are skipped and _COMPLETE goes last."""
    result = sync(str(local), uri)
    _check(result, uri)
    return result


def _check(result: dict, uri: str) -> None:
    if result.get("failed"):
        raise OSError(f"copy to/from {uri}: {result['failed']} file(s) failed: {result.get('failed_names')}")


# ---------------------------------------------------------------- CLI

def configure_parser(parser) -> None:
    parser.description = ("Copy a corpus directory between local disk and gs://bucket/prefix (either direction). "
                          "Shards first, then manifest.json, then _COMPLETE; files whose size and crc32c already "
                          "match are skipped; downloads are verified and renamed into place. Set "
                          "STORAGE_EMULATOR_HOST to talk to an emulator; otherwise application-default credentials.")
    parser.add_argument("src", metavar="SRC", help="local directory or gs://bucket/prefix")
    parser.add_argument("dst", metavar="DST", help="local directory or gs://bucket/prefix")
    parser.add_argument("--workers", type=flag(THREAD_WORKERS), default=8, help="parallel transfers (default: 8)")
    parser.add_argument("--watch", action="store_true",
                        help="keep syncing new files until the source's _COMPLETE has been copied")
    parser.add_argument("--delete", action="store_true",
                        help="delete destination files that are not in the source (never done otherwise)")
    parser.add_argument("--poll-interval", type=flag(POLL_INTERVAL_S), default=5.0,
                        help="seconds between listings in --watch mode (default: 5)")
    parser.add_argument("--attempts", type=flag(ATTEMPTS), default=5,
                        help="tries per file on 408/429/5xx/dropped connections/corrupt transfers (default: 5)")
    parser.add_argument("--backoff", type=flag(BACKOFF_S), default=0.5,
                        help="seconds the first retry waits at most, doubling per retry up to 30, randomized "
                             "(default: 0.5)")
    parser.add_argument("--deadline", type=flag(DEADLINE_S), default=None,
                        help="seconds after which a file is no longer retried (default: no limit)")


def run(args) -> int:
    totals = sync(args.src, args.dst, workers=args.workers, watch=args.watch, delete=args.delete,
                  poll_interval=args.poll_interval, attempts=args.attempts, backoff=args.backoff,
                  deadline=args.deadline)
    print(summary_line(totals))
    return 1 if totals["failed"] else 0
