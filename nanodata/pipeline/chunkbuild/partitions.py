"""Cut a build's inputs into partitions of bounded size, one mapped task each.

A partition is a list of *pieces*, each a run of items of one input:
- {"kind": "jsonl", ...}: a line-aligned byte range of a JSONL input, with the number of its first
  line (so sources and problems name the input's own line numbers). Plain inputs, local or gs://,
  are read in place with ranged reads. A `.gz` input is read once by rapidgzip, which decompresses
  on all the task's cores and exports a seek index (staging gzindex/NNNNN.gzidx); no decompressed byte
  is written, and each chunk task seeks with the index to its own decompressed range. A `.zst` input is
  decompressed once too, noting where its frames start (zstd frames are independent): a piece whose frame
  starts at most a partition before it is read by its chunk task from that frame, nothing staged; a piece
  in a bigger frame (a one-frame file), or of a `.gz` rapidgzip cannot read, is decompressed into a
  file in staging.
- {"kind": "tree", ...}: a run of files of a project tree (path, size, file number), in path order;
  projects are grouped or split wherever the size budget says.
Partitions are closed once they weigh `partition_bytes`, across input boundaries. An item weighs its bytes, or,
when `cached` says the destination's cache holds its result (a nightly rebuild's unchanged record or file),
CACHED_COST of them: a rebuild maps a few chunk tasks of similar work, not one per partition of bytes. Items keep the
gid, source names and line numbers they have in a one-process run (nanodata.pipeline.chunkbuild.sources), so
how the inputs are cut never changes the output. Planning holds one partition's file list at most. Each file it
stages (a partition, a seek index, a decompressed piece) is sealed as it is written (nanodata.storage.auth).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import tempfile
from bisect import bisect_right
from pathlib import Path

from nanodata import storage
from nanodata.errors import NanodataError
from nanodata.pipeline.chunkbuild.reuse import text_content_digest
from nanodata.pipeline.chunkbuild.sources import (
    Problem,
    gid_of,
    jsonl_items,
    line_check,
    record_fields,
    split_at_lines,
    stream_items,
    tree_files,
    tree_item,
)
from nanodata.storage.auth import Secret, read_sealed_json, seal_bytes, seal_file

log = logging.getLogger(__name__)

PARTITIONS = "partitions"   # staging: partitions/NNNNN.json
DECOMPRESSED = "parts"      # staging: decompressed files, pieces of compressed inputs
GZ_INDEX = "gzindex"        # staging: gzindex/NNNNN.gzidx, the rapidgzip seek index of gzip input NNNNN
GZ_READ = 1 << 20
# what an item whose result the cache holds costs its chunk task against chunking it (its range read, its entry read
# and checked, its docs scattered: ~1/10 of chunking it, in basic mode at 16,384 tokens)
CACHED_COST = 0.1


def partition_uri(stage: str, number: int) -> str:
    return storage.join_uri(stage, PARTITIONS, f"{number:05d}.json")


class _Planner:
    """Partitions as they fill: each closed once it weighs `partition_bytes`, written and sealed at once. cached(content
    digest): whether the cache holds that item's result (None: every item weighs its bytes)."""

    def __init__(self, stage: str, partition_bytes: int, secret: Secret, cached):
        self.stage, self.limit, self.secret, self.cached = stage, partition_bytes, secret, cached
        self.pieces: list[dict] = []
        self.problems: list[list[str]] = []
        self.bytes = self.weight = 0
        self.count = 0
        self.total = 0  # bytes of every partition so far
        self.records: list = []  # what _line_weigher took of each JSONL line since the last piece was cut

    @property
    def room(self) -> float:
        return self.limit - self.weight

    def weigh(self, size: int, digest: str | None) -> float:
        """An item's weight: its bytes, a fraction of them when its result is cached."""
        return size * CACHED_COST if digest is not None and self.cached is not None and self.cached(digest) else size

    def planned(self) -> dict:
        """What a JSONL piece just cut holds of its lines' records (`records`: see sources.stream_items), when they
        were weighed (a cache to look them up in): its chunk task then parses only the records whose entries miss."""
        records, self.records = self.records, []
        return {"records": records} if self.cached is not None else {}

    def add(self, piece: dict, size: int, weight: float) -> None:
        self.pieces.append(piece)
        self.bytes += size
        self.weight += weight
        self.total += size
        if self.weight >= self.limit:
            self.close()

    def close(self) -> None:
        if not self.pieces and not self.problems:
            return
        seal_bytes(partition_uri(self.stage, self.count),
                   json.dumps({"partition": self.count, "bytes": self.bytes, "weight": round(self.weight),
                               "pieces": self.pieces, "problems": self.problems}).encode(), self.secret)
        self.count += 1
        self.pieces, self.problems, self.bytes, self.weight = [], [], 0, 0


def _plan_gzip(planner: _Planner, number: int, uri: str, scratch: Path) -> bool:
    """Cut a .gz input by decompressed offsets in one parallel rapidgzip pass and stage its seek index.
    False (nothing planned) when rapidgzip cannot read it: the decompressed-file path then reports what is wrong."""
    import rapidgzip

    pieces = []
    index = scratch / "index.gzidx"
    try:
        # `with` closes the reader: one left open at interpreter exit aborts the process (DESIGN.md)
        cores = len(os.sched_getaffinity(0))  # the cores this task gets, not the machine's
        with storage.open_seekable(uri) as raw, rapidgzip.RapidgzipFile(raw, parallelization=cores) as f:
            for _, cut in split_at_lines(f, planner.room, planner.limit, _line_weigher(planner)):
                if cut is not None:
                    pieces.append((cut, planner.planned()))
            with open(index, "wb") as out:
                f.export_index(out)
    except (ValueError, RuntimeError, OSError) as exc:
        log.warning("%s: rapidgzip cannot read it (%s); decompressing it to staging instead", uri, exc)
        return False
    # rapidgzip ends a truncated file quietly; gzip's footer holds the size mod 2**32 (of the last member:
    # a multi-member file may disagree too, and then takes the decompressed-file path, which checks every member)
    with storage.open_seekable(uri) as raw:
        raw.seek(-4, io.SEEK_END)
        footer = int.from_bytes(raw.read(4), "little")
    if footer != (pieces[-1][0][1] if pieces else 0) % 2 ** 32:
        log.warning("%s: decompressed size disagrees with the gzip footer; decompressing it to staging instead", uri)
        return False
    index_uri = storage.join_uri(planner.stage, GZ_INDEX, f"{number:05d}.gzidx")
    seal_file(index, index_uri, planner.secret)
    # the same cuts split_at_lines gives the decompressed-file path: planner.room only changes at a partition's close,
    # which a cut causes, so cutting first and adding after gives the same pieces
    for (start, stop, first_line, weight), records in pieces:
        planner.add({"kind": "jsonl", "input": number, "display": uri, "uri": uri, "start": start, "stop": stop,
                     "first_line": first_line, "gzindex": index_uri, **records}, stop - start, weight)
    return True


def _line_weigher(planner: _Planner):
    """weigh(line) for split_at_lines: a JSONL record's weight (_Planner.weigh of its text's content digest, as the
    cache keys it), what the chunk task needs of it noted (_Planner.planned); None when nothing is cached (ranges
    are then cut by bytes)."""
    if planner.cached is None:
        return None

    def weigh(line: bytes) -> float:
        fields = record_fields(line, "")
        if not isinstance(fields, tuple):  # not a record: the chunk task names the problem
            planner.records.append(None)
            return len(line)
        text, *rest = fields
        digest = text_content_digest(text, None)
        planner.records.append([line_check(line), digest, *rest])
        return planner.weigh(len(line), digest)

    return weigh


def _plan_jsonl(planner: _Planner, number: int, uri: str, scratch: Path) -> None:
    kind = storage.compression_of(uri)
    if kind == "gzip" and _plan_gzip(planner, number, uri, scratch):
        return
    planner.records = []  # (what a failed gzip pass noted past its last cut)
    try:
        if kind == "zstd":  # frames are independent: a piece can be read from the start of its frame
            with storage.open_read(uri) as raw:
                frames = _ZstdFrames(raw)
                _plan_stream(planner, number, uri, scratch, frames, lambda offset: _zstd_seek(frames, offset, planner.limit))
        else:
            with storage.open_decompressed(uri) as stream:
                _plan_stream(planner, number, uri, scratch, stream, (lambda _: None) if kind else (lambda _: {}))
    except storage.decompression_errors() as exc:  # a truncated or corrupt .gz / .zst: no partial corpus
        raise NanodataError(f"{uri}: cannot decompress: {exc}") from None


def _plan_stream(planner: _Planner, number: int, uri: str, scratch: Path, stream, seek) -> None:
    """Cut an input's (decompressed) stream into pieces. seek(offset): what a chunk task needs to read the input in
    place from that decompressed offset ({} for a plain input; a .zst frame's offsets), or None: the piece is
    decompressed once into a decompressed file in staging."""
    base = {"kind": "jsonl", "input": number, "display": uri}
    copy, where = None, seek(0)
    for data, cut in split_at_lines(stream, planner.room, planner.limit, _line_weigher(planner)):
        if where is None:
            if copy is None:
                copy = open(scratch / "decompressed.jsonl", "wb")
            copy.write(data)
        if cut is None:
            continue
        start, stop, first_line, weight = cut
        if where is None:
            copy.close()
            copy = None
            target = storage.join_uri(planner.stage, DECOMPRESSED, f"{number:05d}-{planner.count:05d}.jsonl")
            seal_file(scratch / "decompressed.jsonl", target, planner.secret)
            piece = {**base, "uri": target, "start": 0, "stop": None, "first_line": first_line}
        else:
            piece = {**base, "uri": uri, "start": start, "stop": stop, "first_line": first_line, **where}
        piece.update(planner.planned())
        planner.add(piece, stop - start, weight)
        where = seek(stop)


class _ZstdFrames:
    """A .zst input read as one decompressed stream, noting where each frame starts: frames[i] = (compressed
    offset, decompressed offset)."""

    def __init__(self, raw):
        import zstandard

        self._raw, self._dctx = raw, zstandard.ZstdDecompressor()
        self._frame, self._left = self._dctx.decompressobj(), b""
        self._fed = self._out = 0  # compressed bytes decompressed, decompressed bytes returned
        self.frames = [(0, 0)]

    def read(self, _size: int = -1) -> bytes:
        import zstandard

        while chunk := self._left or self._raw.read(GZ_READ):
            data = self._frame.decompress(chunk)
            self._left = self._frame.unused_data if self._frame.eof else b""
            self._fed += len(chunk) - len(self._left)
            self._out += len(data)
            if self._frame.eof:  # the next frame starts here
                self.frames.append((self._fed, self._out))
                self._frame = self._dctx.decompressobj()
            if data:
                return data
        if self._fed > self.frames[-1][0]:
            raise zstandard.ZstdError("truncated input: its last frame has no end")
        return b""


def _zstd_seek(frames: _ZstdFrames, offset: int, limit: int) -> dict | None:
    """Where to read from the decompressed `offset`: the start of its frame, when that is at most `limit` bytes
    before it (each task decompresses at most twice its own bytes); else None (a decompressed file: a one-frame input)."""
    compressed, decompressed = frames.frames[bisect_right(frames.frames, offset, key=lambda f: f[1]) - 1]
    return {"zstd_frame": [compressed, decompressed]} if offset - decompressed <= limit else None


def listing_path(listings: str | os.PathLike, number: int) -> Path:
    """Where planning keeps input `number`'s tree listing (jobs.inputs.tree_digest writes it as it hashes)."""
    return Path(listings) / f"{number:05d}.listing"


def _listed(path: Path):
    """A tree listing's entries, as hashed_tree_files yields them."""
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            yield (Problem(*entry["problem"]), 0, None) if isinstance(entry, dict) else tuple(entry)


def _plan_tree(planner: _Planner, number: int, root: str, extensions: tuple[str, ...], listing: Path | None) -> None:
    """A tree's files in partitions: from its listing (with each file's content digest) when planning hashed it,
    else walked here."""
    files: list = []
    size_sum = weight_sum = 0

    def flush():
        nonlocal files, size_sum, weight_sum
        if files:
            planner.add({"kind": "tree", "input": number, "root": root, "files": files}, size_sum, weight_sum)
        files, size_sum, weight_sum = [], 0, 0

    k = 0  # file number: counts files only, as sources.tree_items does
    entries = _listed(listing) if listing is not None and listing.is_file() else (
        (rel, size, None) for rel, size in tree_files(root, extensions))
    for rel, size, digest in entries:
        if isinstance(rel, Problem):
            planner.problems.append([rel.where, rel.reason, rel.status])
            continue
        weight = planner.weigh(size, digest)
        if weight > planner.limit and (files or planner.pieces):
            flush()  # a file heavier than a partition gets one of its own: no other partition passes 2x the weight
            planner.close()
        files.append([rel, size, k, digest])
        k += 1
        size_sum += size
        weight_sum += weight
        if planner.weight + weight_sum >= planner.limit:
            flush()
    flush()


def plan_partitions(inputs: list[dict], stage: str, partition_bytes: int, extensions: tuple[str, ...],
                    listings: str | os.PathLike | None = None, *, secret: Secret, cached=None) -> tuple[int, int]:
    """Write stage/partitions/NNNNN.json for `inputs` ([{"kind": "jsonl" | "tree", "uri"}], in run order:
    the input number is the position), each sealed with `secret`; returns how many there are and their bytes
    (decompressed). listings: where planning left the trees' listings (listing_path), whose files' digests go into
    the partitions. cached(content digest) -> bool: whether the cache holds an item's result, which then weighs
    CACHED_COST of its bytes (None: every item weighs its bytes, as in a first build)."""
    planner = _Planner(stage, partition_bytes, secret, cached)
    scratch = Path(tempfile.mkdtemp(prefix="nanodata-plan-"))
    try:
        for number, entry in enumerate(inputs):
            if entry["kind"] == "jsonl":
                _plan_jsonl(planner, number, entry["uri"], scratch)
            else:
                _plan_tree(planner, number, entry["uri"], extensions,
                           None if listings is None else listing_path(listings, number))
        planner.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return planner.count, planner.total


def load_partition(stage: str, number: int, secret: Secret) -> dict:
    """Partition `number` under its seal (BrokenSeal when it is missing or not as planned)."""
    return read_sealed_json(partition_uri(stage, number), secret, required=True)


def partition_items(partition: dict, max_file_bytes: int | None):
    """The items of a partition, streamed, with the gids and names a one-process run gives them."""
    for where, reason, status in partition["problems"]:
        yield Problem(where, reason, status)
    for piece in partition["pieces"]:
        if piece.get("gzindex"):
            yield from _range_items(piece, max_file_bytes, _gzip_reader)
        elif piece.get("zstd_frame"):
            yield from _range_items(piece, max_file_bytes, _zstd_reader)
        elif piece["kind"] == "jsonl":
            yield from jsonl_items(piece["uri"], piece["input"], max_file_bytes, display=piece["display"],
                                   start=piece["start"], stop=piece["stop"], first_line=piece["first_line"],
                                   planned=piece.get("records"))
        else:
            for rel, size, k, digest in piece["files"]:
                yield tree_item(piece["root"], rel, size, gid_of(piece["input"], k), max_file_bytes, digest)


@contextlib.contextmanager
def _gzip_reader(piece: dict, tmp: Path):
    """A decompressed reader of a .gz input at the piece's start: rapidgzip seeks there with the staged index (one
    core); `with` closes it (DESIGN.md)."""
    import rapidgzip

    index = storage.local_copy(piece["gzindex"], tmp / "index.gzidx")
    with storage.open_seekable(piece["uri"]) as raw, rapidgzip.RapidgzipFile(raw, parallelization=1) as f, \
            open(index, "rb") as idx:
        f.import_index(idx)
        f.seek(piece["start"])
        yield f


@contextlib.contextmanager
def _zstd_reader(piece: dict, tmp: Path):
    """A decompressed reader of a .zst input at the piece's start: decompressed from the start of its frame."""
    import zstandard

    compressed, decompressed = piece["zstd_frame"]
    with storage.open_read(piece["uri"], compressed) as raw, \
            zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True) as f:
        skip = piece["start"] - decompressed
        while skip > 0 and (block := f.read(min(skip, GZ_READ))):
            skip -= len(block)
        yield f


def _range_items(piece: dict, max_file_bytes: int | None, reader):
    """The items of a decompressed range of a compressed input: reader(piece, tmp) opens it at the range's start (no
    decompressed byte is staged); the range is read as it is decompressed, with the input's line numbers."""
    with tempfile.TemporaryDirectory(prefix="nanodata-range-") as tmp, reader(piece, Path(tmp)) as f:
        yield from stream_items(storage.open_window(f, piece["stop"] - piece["start"]), piece["display"],
                                piece["input"], max_file_bytes, first_line=piece["first_line"],
                                planned=piece.get("records"))


def describe(partition: dict) -> str:
    """One line for a task log: which inputs, byte ranges and files this partition holds."""
    described = []
    for piece in partition["pieces"]:
        if piece["kind"] == "jsonl":
            stop = "end" if piece["stop"] is None else piece["stop"]
            where = (f"decompressed bytes {piece['start']}-{stop} (gzip seek index)" if piece.get("gzindex")
                     else f"decompressed bytes {piece['start']}-{stop} (zstd frame at byte {piece['zstd_frame'][0]})"
                     if piece.get("zstd_frame")
                     else f"bytes {piece['start']}-{stop}" if piece["uri"] == piece["display"]
                     else f"decompressed file {piece['uri'].rsplit('/', 1)[-1]}")
            described.append(f"{piece['display']} from line {piece['first_line']} ({where})")
        else:
            files = piece["files"]
            described.append(f"{piece['root']}: {len(files)} files {files[0][0]} .. {files[-1][0]}")
    return f"partition {partition['partition']} ({partition['bytes'] / 1e6:.1f} MB): " + "; ".join(described)
