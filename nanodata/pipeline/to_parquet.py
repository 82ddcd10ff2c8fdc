"""JSONL → shuffled parquet shards + val_shard.parquet + manifest.json + _COMPLETE, crash-safe.

The algorithm, one shard at a time (memory holds one row group, whatever the input or doc size):
  read whole lines (nanodata.pipeline.jsonl) → parse and check each doc, once (bad lines counted by kind) →
  the shared rule (nanodata.pipeline.shuffle, also the corpus DAG's) sends a doc to val by a seeded hash
  of its content digest; train docs go to a spool on disk as the strings their parse found, with their
  seeded sort key, each block's docs one run sorted by it (RowSpool) → a shard closes at --rows-per-file docs or `shard_bytes` bytes of JSON lines;
  its docs are written sorted by key in row groups of at most --row-group-size rows and `row_group_bytes`
  bytes →
  `_progress.json` records the input position, shard index and counts.
At the end: the last partial shard, the val shard (its docs sorted by the same key), manifest.json, then
_COMPLETE. Inputs without a single good doc are an error, not a complete corpus of nothing.

A re-run after a crash or kill -9 resumes from `_progress.json`: it truncates the val spool to the
checkpointed length and re-reads from the checkpointed offset, so it writes exactly the bytes an
uninterrupted run writes. The shuffle needs no saved state: it is a sort by a hash of each doc.
Because val membership depends only on the text, the val set does not change with --rows-per-file
or with where a run stopped (the published script took val from the last partial batch only).
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
from pathlib import Path

import numpy as np

from nanodata import __version__
from nanodata.corpus.layout import COMPLETE, MANIFEST, VAL_NAME, Manifest, ShardEntry, shard_name
from nanodata.errors import NanodataError
from nanodata.pipeline.jsonl import parse_block, read_blocks
from nanodata.pipeline.shuffle import FILE_BYTES, ROW_GROUP_BYTES, RowSpool, shuffle_keys, text_digests, val_mask
from nanodata.ranges import IDLE_TIMEOUT_S, ROW_GROUP_SIZE, ROWS_PER_FILE, SEED, VAL_FRACTION, flag, local_path
from nanodata.storage.files import atomic_write, disk_errors

log = logging.getLogger(__name__)

PROGRESS = "_progress.json"
VAL_SPOOL = "_val_rows.jsonl"  # raw val lines in input order; `_` so sync never copies it
TRAIN_SPOOL = "_train_rows.bin"  # the parsed rows of the shard being filled (RowSpool)
COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")
FIRST_BAD_LINES = 5  # line numbers kept per kind of bad line




class Converter:
    """The state `_progress.json` holds, and the steps that advance it."""

    def __init__(self, inputs, out_dir: Path, rows_per_file: int, row_group_size: int, val_fraction: float,
                 seed: int, compression: str, on_error: str, row_group_bytes: int = ROW_GROUP_BYTES,
                 shard_bytes: int = FILE_BYTES, made_by: str = "to-parquet"):
        self.out = out_dir
        self.made_by = made_by  # the manifest's created_by names the command
        self.params = {"inputs": [os.path.abspath(p) for p in inputs], "rows_per_file": rows_per_file,
                       "row_group_size": row_group_size, "val_fraction": val_fraction, "seed": seed,
                       "compression": compression, "row_group_bytes": row_group_bytes, "shard_bytes": shard_bytes}
        self.on_error = on_error
        self.state = {"input_index": 0, "offset": 0, "line_no": 0, "shards": [], "val_spool_bytes": 0,
                      "val_rows": 0, "bad_lines": {}, "complete": False}
        self.train: RowSpool | None = None  # train docs of the shard being filled (on disk, not in memory)

    # -- checkpoint
    def load_progress(self) -> bool:
        path = self.out / PROGRESS
        if not path.is_file():
            return False
        saved = json.loads(path.read_text())
        for key, value in self.params.items():
            if saved["params"].get(key, value) != value:
                flag = "--input" if key == "inputs" else "--" + key.replace("_", "-")
                raise NanodataError(f"{path}: this directory was started with {flag} {saved['params'][key]}, "
                                    f"not {value}; rerun with the same parameters or use a fresh --out")
        self.state = saved["state"]
        log.info("resuming %s: %d shard(s) done, input %d at byte %d", self.out, len(self.state["shards"]),
                 self.state["input_index"], self.state["offset"])
        return True

    def save_progress(self, spool=None) -> None:
        if spool is not None:  # the val lines the checkpoint counts must be on disk before it
            with disk_errors(spool.name):
                spool.flush()
                os.fsync(spool.fileno())
            self.state["val_spool_bytes"] = spool.tell()
        atomic_write(self.out / PROGRESS, json.dumps({"params": self.params, "state": self.state}))

    # -- steps
    def bad_line(self, kind: str, detail: str, where: str) -> None:
        if self.on_error == "fail":
            raise NanodataError(f"{where}: {kind.replace('_', ' ')}: {detail} (--on-error fail)")
        entry = self.state["bad_lines"].setdefault(kind, {"count": 0, "first_lines": []})
        entry["count"] += 1
        if len(entry["first_lines"]) < FIRST_BAD_LINES:
            entry["first_lines"].append(where)
            log.warning("%s: skipped, %s: %s", where, kind, detail[:200])

    def flush_shard(self, spool) -> None:
        """Write the train spool as the next shard, sorted by the shared shuffle key, and checkpoint."""
        index = len(self.state["shards"])
        train = self.train
        try:
            files = train.write(lambda _: self.out / shard_name(index), rows_per_file=len(train), file_bytes=2 ** 62,
                                row_group_rows=self.params["row_group_size"],
                                row_group_bytes=self.params["row_group_bytes"], compression=self.params["compression"])
        finally:
            train.close()
        self.state["shards"].extend(files)
        self.save_progress(spool)
        self.train = RowSpool(self.out / TRAIN_SPOOL)

    def consume(self, path: str, block_start: int, block: memoryview, spool) -> None:
        """Route one block's docs to the val spool / train spool in line order, flushing (and checkpointing)
        when the train spool holds rows_per_file docs or shard_bytes bytes: the checkpoint written there
        covers exactly the lines before it, their bad-line counts and val rows, no more. Each line is parsed
        once: the train spool keeps the parsed rows."""
        parsed = parse_block(block)
        lines, ends = parsed.lines, parsed.ends
        widths = ends - parsed.starts
        if len(block) and block[-1] != ord("\n"):
            widths[-1] += 1  # a last line without its newline is spooled with one
        digests = text_digests(parsed.table.column("text"))
        seed = self.params["seed"]
        val = val_mask(digests, seed, self.params["val_fraction"])
        keys, weights = shuffle_keys(digests, seed), widths[lines]
        train = np.flatnonzero(~val)
        bad = collections.deque(parsed.bad)
        first_line_no = self.state["line_no"] + 1
        done_rows = done_train = 0  # the rows and train rows already routed
        while True:
            flush = self.next_flush(weights[train[done_train:]])
            last_line = int(lines[train[done_train + flush]]) if flush is not None else len(ends) - 1
            upto = int(np.searchsorted(lines, last_line, side="right"))
            while bad and bad[0][0] <= last_line:  # bad lines come in line order
                line, kind, detail = bad.popleft()
                self.bad_line(kind, detail, f"{path}:{first_line_no + line}")
            routed = train[done_train:done_train + flush + 1] if flush is not None else train[done_train:]
            self.train.add_rows(keys[routed], weights[routed], parsed.table, routed)
            for row in np.flatnonzero(val[done_rows:upto]) + done_rows:
                line = lines[row]
                spool.write(bytes(block[parsed.starts[line]:ends[line]]).rstrip(b"\n") + b"\n")
                self.state["val_rows"] += 1
            if flush is None:
                break
            self.state["offset"] = block_start + int(ends[last_line])
            self.state["line_no"] = first_line_no + last_line
            self.flush_shard(spool)
            done_rows, done_train = upto, done_train + flush + 1
        self.state["offset"] = block_start + (int(ends[-1]) if len(ends) else 0)
        self.state["line_no"] = first_line_no + len(ends) - 1

    def next_flush(self, weights: np.ndarray) -> int | None:
        """Index of the train row that fills the shard (rows_per_file rows or shard_bytes bytes), if any."""
        need_rows = self.params["rows_per_file"] - len(self.train)
        need_bytes = self.params["shard_bytes"] - self.train.bytes
        at = min(need_rows - 1, int(np.searchsorted(np.cumsum(weights), need_bytes, side="left")))
        return at if at < len(weights) else None

    @contextlib.contextmanager
    def session(self):
        """The val spool (yielded) and a fresh train spool, open while blocks are consumed; on a normal exit
        the last partial shard is written (or the checkpoint saved)."""
        # every other file has its own disk_errors, so a full disk met here is the spool's
        with disk_errors(self.out / VAL_SPOOL), open(self.out / VAL_SPOOL, "ab+") as spool:
            if spool.seek(0, os.SEEK_END) < self.state["val_spool_bytes"]:
                raise NanodataError(f"{self.out / VAL_SPOOL}: shorter than {PROGRESS} records; use a fresh --out")
            spool.truncate(self.state["val_spool_bytes"])  # drop val lines read after the last checkpoint
            spool.seek(self.state["val_spool_bytes"])
            # a checkpoint is only written with the train spool empty: a resumed run starts a fresh one
            self.train = RowSpool(self.out / TRAIN_SPOOL)
            try:
                yield spool
                if len(self.train):
                    self.flush_shard(spool)
                else:
                    self.save_progress(spool)
            finally:
                self.train.close()  # closing twice (after a failed flush) is harmless

    def convert(self, follow: bool, idle_timeout: float, progress) -> None:
        with self.session() as spool:
            inputs = self.params["inputs"]
            while self.state["input_index"] < len(inputs):
                path = inputs[self.state["input_index"]]
                for start, block in read_blocks(path, self.state["offset"], follow=follow,
                                                idle_timeout=idle_timeout):
                    self.consume(path, start, block, spool)
                    progress()
                self.state.update(input_index=self.state["input_index"] + 1, offset=0, line_no=0)

    def finish(self, inputs: str) -> dict:
        """After the last block: val_shard.parquet, manifest.json, then _COMPLETE; returns the manifest.
        `inputs` names what was read, for the error of a corpus of nothing (which is not complete)."""
        if not self.state["shards"] and not self.state["val_rows"]:
            bad = self.state["bad_lines"]
            raise NanodataError(f"{inputs}: no good doc, {sum(v['count'] for v in bad.values())} bad line(s) "
                                f"({bad_summary(bad)}); no shard, {MANIFEST} or {COMPLETE} written to {self.out}")
        typed = self.manifest(self.write_val())
        atomic_write(self.out / MANIFEST, typed.to_bytes())
        manifest = typed.to_json()
        atomic_write(self.out / COMPLETE, b"")
        self.state["complete"] = True
        self.save_progress()
        (self.out / VAL_SPOOL).unlink(missing_ok=True)
        log.info("%s: %d shard(s), %d train rows, %d val rows, bad lines: %s", self.out, len(manifest["shards"]),
                 manifest["total_rows"] - self.state["val_rows"], self.state["val_rows"],
                 bad_summary(manifest["bad_lines"]))
        return manifest

    def write_val(self) -> dict | None:
        """val_shard.parquet: the val spool's docs sorted by the shuffle key, as the DAG's val task writes it."""
        if self.state["val_rows"] == 0:
            if self.params["val_fraction"] > 0:
                log.warning("%s: no doc hashed into val (val fraction %s); manifest val is null",
                            self.out, self.params["val_fraction"])
            return None
        val = RowSpool(self.out / TRAIN_SPOOL)
        try:
            for _, block in read_blocks(self.out / VAL_SPOOL):
                parsed = parse_block(block)
                keys = shuffle_keys(text_digests(parsed.table.column("text")), self.params["seed"])
                val.add_rows(keys, (parsed.ends - parsed.starts)[parsed.lines], parsed.table,
                             np.arange(parsed.table.num_rows))
            [entry] = val.write(lambda _: self.out / VAL_NAME, rows_per_file=len(val), file_bytes=2 ** 62,
                                row_group_rows=self.params["row_group_size"],
                                row_group_bytes=self.params["row_group_bytes"], compression=self.params["compression"])
        finally:
            val.close()
        return {k: v for k, v in entry.items() if k != "tokens"}  # the val entry carries no token count

    def manifest(self, val: dict | None) -> Manifest:
        shards = [ShardEntry(**s) for s in self.state["shards"]]
        val = ShardEntry(**val) if val else None
        return Manifest(shards=shards, val=val, bad_lines=self.state["bad_lines"],
                        total_rows=sum(s.rows for s in shards) + (val.rows if val else 0),
                        created_by=f"nanodata {__version__} {self.made_by}")


def check_params(inputs, out: Path, rows_per_file, row_group_size, val_fraction, seed, compression, on_error,
                 follow, idle_timeout) -> None:
    if not inputs:
        raise NanodataError("--input: at least one JSONL file is needed")
    for path in map(Path, inputs):
        if path.is_dir():
            raise NanodataError(f"--input {path}: is a directory; give JSONL files")
        if not follow and not path.is_file():  # a followed input may appear later
            raise NanodataError(f"--input {path}: input file does not exist")
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise NanodataError(f"--out {out}: {existing} is a file, not a directory")
    ROWS_PER_FILE.check("--rows-per-file", rows_per_file)
    ROW_GROUP_SIZE.check("--row-group-size", row_group_size)
    if not 0 <= val_fraction < 1:
        raise NanodataError(f"--val-fraction must be in [0, 1), not {val_fraction}")
    if seed < 0:  # the shuffle's RNG takes non-negative seeds only
        raise NanodataError(f"--seed must be >= 0, not {seed}")
    if compression not in COMPRESSIONS:
        raise NanodataError(f"--compression must be one of {', '.join(COMPRESSIONS)}, not {compression!r}")
    if on_error not in ("skip", "fail"):
        raise NanodataError(f"--on-error must be 'skip' or 'fail', not {on_error!r}")
    if not idle_timeout >= 0:  # NaN too: it would never end a followed input
        raise NanodataError(f"--idle-timeout must be >= 0, not {idle_timeout}")


def bad_summary(bad_lines: dict) -> str:
    return ", ".join(f"{v['count']} {kind}" for kind, v in sorted(bad_lines.items())) or "none"


def jsonl_to_parquet(inputs, out_dir, *, rows_per_file: int = ROWS_PER_FILE.default,
                     row_group_size: int = ROW_GROUP_SIZE.default, val_fraction: float = VAL_FRACTION.default,
                     seed: int = SEED.default, follow: bool = False, idle_timeout: float = 60.0,
                     compression: str = "zstd", on_error: str = "skip", row_group_bytes: int = ROW_GROUP_BYTES,
                     shard_bytes: int = FILE_BYTES) -> dict:
    """Convert JSONL docs into parquet shards in out_dir (resuming a crashed run there); returns the manifest."""
    inputs = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    out = Path(out_dir)
    check_params(inputs, out, rows_per_file, row_group_size, val_fraction, seed, compression, on_error, follow,
                 idle_timeout)
    with disk_errors(out):
        out.mkdir(parents=True, exist_ok=True)
    conv = Converter(inputs, out, rows_per_file, row_group_size, val_fraction, seed, compression, on_error,
                     row_group_bytes, shard_bytes)
    if not conv.load_progress():
        foreign = sorted(p.name for p in out.iterdir() if p.suffix == ".parquet" or p.name == MANIFEST)
        if foreign:
            raise NanodataError(f"{out}: holds {foreign[0]} (and {len(foreign) - 1} more) but no {PROGRESS}, so "
                                f"they are not from a to-parquet run that can be resumed; use an empty --out")
        conv.save_progress()  # from here on, every shard in out_dir is covered by a checkpoint
    if conv.state["complete"]:
        log.info("%s is already complete; nothing to do", out)
        if not (out / COMPLETE).is_file():  # killed between writing it and the last checkpoint
            atomic_write(out / COMPLETE, b"")
        (out / VAL_SPOOL).unlink(missing_ok=True)  # killed before removing it
        return Manifest.from_bytes((out / MANIFEST).read_bytes(), str(out / MANIFEST)).to_json()
    (out / COMPLETE).unlink(missing_ok=True)  # whatever is here is about to change
    for stale in out.glob("*.tmp"):  # partial writes of a killed run
        stale.unlink()

    from tqdm import tqdm

    sizes = [os.path.getsize(p) if os.path.isfile(p) else 0 for p in conv.params["inputs"]]
    with tqdm(total=None if follow else sum(sizes), unit="B", unit_scale=True, desc="to-parquet",
              disable=None) as bar:
        def progress() -> None:
            bar.update(sum(sizes[:conv.state["input_index"]]) + conv.state["offset"] - bar.n)

        progress()
        conv.convert(follow, idle_timeout, progress)
    return conv.finish(f"--input {' '.join(conv.params['inputs'])}")


def add_shard_flags(parser) -> None:
    """--rows-per-file, --val-fraction and --seed: how docs become shards, for to-parquet and chunk --parquet-dir."""
    parser.add_argument("--rows-per-file", type=flag(ROWS_PER_FILE), default=ROWS_PER_FILE.default,
                        help=f"train docs per shard, at most: a shard also closes at {FILE_BYTES >> 20} MB of JSON "
                             f"lines (default: {ROWS_PER_FILE.default})")
    parser.add_argument("--val-fraction", type=flag(VAL_FRACTION), default=VAL_FRACTION.default,
                        help=f"fraction of docs hashed into val_shard.parquet (default: {VAL_FRACTION.default})")
    parser.add_argument("--seed", type=flag(SEED), default=SEED.default,
                        help=f"seed of the shuffle and the val split (default: {SEED.default})")


def configure_parser(parser) -> None:
    parser.description = ("Convert JSONL docs ({'text': ..., plus the chunker's n_tokens/mode/source/lines/kind}) into "
                          "parquet shards shuffled within each shard, a val_shard.parquet chosen by a stable hash of "
                          "the text, manifest.json and then _COMPLETE. Crash-safe: rerun the same command after a "
                          "crash and it continues from _progress.json, producing identical shards.")
    parser.add_argument("--input", nargs="+", action="extend", required=True, metavar="JSONL",
                        help="JSONL file(s), read in the order given")
    parser.add_argument("--out", type=local_path(), required=True, help="output directory")
    add_shard_flags(parser)
    parser.add_argument("--row-group-size", type=flag(ROW_GROUP_SIZE), default=ROW_GROUP_SIZE.default,
                        help=f"docs per parquet row group, at most: a group also closes at {ROW_GROUP_BYTES >> 20} MB; "
                             f"the loader strides row groups across ranks (default: {ROW_GROUP_SIZE.default})")
    parser.add_argument("--follow", action="store_true",
                        help="tail inputs still being written; an input ends at its X.jsonl.done marker or "
                             "after --idle-timeout seconds without growth")
    parser.add_argument("--idle-timeout", type=flag(IDLE_TIMEOUT_S), default=60.0,
                        help="with --follow: seconds without growth that end an input (default: 60)")
    parser.add_argument("--compression", default="zstd", choices=COMPRESSIONS, help="parquet codec (default: zstd)")
    parser.add_argument("--on-error", default="skip", choices=("skip", "fail"),
                        help="bad lines (not UTF-8, invalid JSON, missing/non-string/empty text, ...): skip and "
                             "count them in the manifest (default), or stop at the first one")


def run(args) -> int:
    manifest = jsonl_to_parquet(args.input, args.out, rows_per_file=args.rows_per_file,
                                row_group_size=args.row_group_size, val_fraction=args.val_fraction, seed=args.seed,
                                follow=args.follow, idle_timeout=args.idle_timeout, compression=args.compression,
                                on_error=args.on_error)
    bad = sum(v["count"] for v in manifest["bad_lines"].values())
    print(f"wrote {len(manifest['shards'])} shard(s) + {'val' if manifest['val'] else 'no val'} to {args.out}: "
          f"{manifest['total_rows']} rows, {bad} bad line(s) skipped")
    return 0
