"""The secret a build authenticates what it reads back with, and keyed MACs over stored bytes.

A cache or staging area that anyone with bucket access can write is an input, not a trusted memory: a checksum
anyone can recompute only catches accidents. So what a build stores for a later run or another task carries a
keyed MAC (blake2b-256 keyed by the secret, one `purpose` per kind of thing stored) over where it is stored (its
key or name) and its bytes; a MAC that does not hold is a miss, rebuilt, never data handed on. The secret never
lives beside what it protects; a missing or changed secret only makes every entry a miss (a cold cache).

Where the secret comes from (`load_secret`): a value given by the caller (the corpus DAG's Airflow Variable
`nanodata_cache_secret`), else the environment variable NANODATA_CACHE_SECRET, else a file of SECRET_BYTES random
bytes in the user's config directory ($XDG_CONFIG_HOME/nanodata/cache_secret, else ~/.config/nanodata/cache_secret),
created on first use with mode 0600 (atomically: a racing process uses the file the first one made). A file that
others may read, or of another size, is refused in one line naming it.

Staged files (one build task's output that another reads) are sealed by a sidecar NAME.mac written after NAME:
a MAC over NAME's URI and the sha256 of each of its *pieces* (byte ranges the writer cuts where readers read
alone: a bucket's range of a scattered partition, a block of signatures; most files are one piece), and those
digests. Writers: `sealed_output` (bytes hashed as written), `seal_file` (a local file), `seal_bytes` / `seal_json`.
Readers: `sealed` checks the seal, and its `Sealed` checks the bytes as they are read, whole or a range (one
piece's digest per piece read, streamed: a reader of one range never reads the rest); `read_sealed`, `read_sealed_json(s)`, `checked_file` on top. A file that is not as sealed where it is
raises BrokenSeal (one line naming it), or, from checked_file, is None: the caller makes it again or says what to do.
Staged files and their seals are written without fsync (still whole, by rename): a file a power cut tears or loses
fails its seal like any other, so a retry makes it again, or the reading task stops in one line, never reads it.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage.files import BLOCK, atomic_output
from nanodata.storage.uri import _concurrently as concurrently
from nanodata.storage.uri import exists, is_gcs, local_copy, open_read, read_bytes, write_bytes, write_file

log = logging.getLogger(__name__)

SECRET_ENV = "NANODATA_CACHE_SECRET"
SECRET_BYTES = 32          # of the secret file
MIN_SECRET_CHARS = 16      # of a secret given as text (the Variable, the environment variable)
MAC_BYTES = 32
MAC_SUFFIX = ".mac"        # a staged file's seal, beside it
SEAL_MAGIC = b"nds2"


def secret_path() -> Path:
    """Where the user's secret file is: $XDG_CONFIG_HOME/nanodata/cache_secret, else ~/.config/nanodata/…."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "nanodata" / "cache_secret"


@dataclass(frozen=True)
class Secret:
    """The MAC key (derived from the secret; never written anywhere) and where the secret came from, in words."""
    key: bytes = field(repr=False)
    origin: str = ""

    def mac(self, purpose: bytes, *parts: bytes | memoryview) -> bytes:
        """Keyed blake2b-256 over the parts, each behind its length (so no two lists of parts collide)."""
        h = hashlib.blake2b(digest_size=MAC_BYTES, key=self.key, person=purpose[:16])
        for part in parts:
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return h.digest()

    def holds(self, mac: bytes, purpose: bytes, *parts: bytes | memoryview) -> bool:
        return hmac.compare_digest(mac, self.mac(purpose, *parts))


def _derive(secret: bytes, origin: str) -> Secret:
    return Secret(hashlib.blake2b(secret, digest_size=32, person=b"nanodata-secret").digest(), origin)


def _from_text(value: str | bytes, origin: str) -> Secret:
    text = value.encode() if isinstance(value, str) else bytes(value)
    if len(text.strip()) < MIN_SECRET_CHARS:
        raise NanodataError(f"{origin}: {len(text.strip())} characters; a cache secret needs at least "
                            f"{MIN_SECRET_CHARS} (e.g. the output of `openssl rand -hex 32`)")
    return _derive(text.strip(), origin)


def load_secret(value: Secret | str | bytes | None = None) -> Secret:
    """The secret: `value` when given (a Secret passes through), else NANODATA_CACHE_SECRET, else the user's secret
    file (made on first use)."""
    if isinstance(value, Secret):
        return value
    if value is not None and (value.strip() if isinstance(value, str) else value):
        return _from_text(value, "the given cache secret")
    env = os.environ.get(SECRET_ENV, "")
    if env.strip():
        return _from_text(env, SECRET_ENV)
    return _derive(_secret_file(secret_path()), str(secret_path()))


def _secret_file(path: Path) -> bytes:
    """The secret file's bytes, created first when there is none (its own temp name, then a hard link: of two
    racing processes, one file wins and both read it)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, os.urandom(SECRET_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
            log.info("cache secret created: %s", path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise NanodataError(f"cache secret {path}: not a regular file")
    if info.st_mode & 0o077:
        raise NanodataError(f"cache secret {path}: mode {stat.S_IMODE(info.st_mode):04o} lets others read it; "
                            f"chmod 600 it (or remove it: a new one is made, and the cache starts cold)")
    data = path.read_bytes()
    if len(data) != SECRET_BYTES:
        raise NanodataError(f"cache secret {path}: {len(data)} bytes, expected {SECRET_BYTES}; remove it (a new one "
                            "is made, and the cache starts cold)")
    return data


# ---------------------------------------------------------------- staged files: NAME and its seal NAME.mac

STAGED = b"nanodata-staged"
PIECE_DIGEST = hashlib.sha256
DIGEST_BYTES = 32
# magic | MAC | n | n + 1 piece bounds (u64 LE) | n piece digests: the MAC is over the URI, the bounds and the digests
SEAL_HEAD = len(SEAL_MAGIC) + MAC_BYTES + 8
NOT_HOLDING = "its seal does not hold (edited, moved from elsewhere, or sealed with another secret: do all workers " \
              "share the cache secret?)"


class BrokenSeal(NanodataError):
    """A staged file that is not as it was sealed where it is: its seal missing or not holding, or the file gone
    from under its seal. `uri` names the file."""

    def __init__(self, uri: str, problem: str):
        super().__init__(f"{uri}: {problem}")
        self.uri = uri


class _Pieces:
    """The digest of each piece of bytes given in order: cut() ends one; a file has one piece more than its cuts."""

    def __init__(self):
        self.bounds, self.digests, self.size, self._h = [0], bytearray(), 0, PIECE_DIGEST()

    def update(self, data: bytes | memoryview) -> None:
        self._h.update(data)
        self.size += len(data)

    def cut(self) -> None:
        self.digests += self._h.digest()
        self.bounds.append(self.size)
        self._h = PIECE_DIGEST()

    def seal(self, secret: Secret, uri: str) -> bytes:
        """The seal's bytes, the last piece ended first."""
        self.cut()
        bounds = struct.pack(f"<{len(self.bounds)}Q", *self.bounds)
        mac = secret.mac(STAGED, uri.encode("utf-8", "surrogateescape"), bounds, bytes(self.digests))
        return SEAL_MAGIC + mac + (len(self.bounds) - 1).to_bytes(8, "little") + bounds + bytes(self.digests)


class SealedWriter:
    """What sealed_output yields: write(data) as to a file; cut() between pieces a reader reads alone (a range)."""

    def __init__(self, f):
        self._f, self.pieces = f, _Pieces()

    def write(self, data: bytes | memoryview) -> int:
        self.pieces.update(data)
        return self._f.write(data)

    def tell(self) -> int:
        return self.pieces.size

    def cut(self) -> None:
        self.pieces.cut()


@contextlib.contextmanager
def sealed_output(uri: str, secret: Secret, scratch: str | os.PathLike):
    """`with sealed_output(uri, secret, scratch) as out: out.write(...)`: the bytes become `uri` whole (local: temp +
    rename; gs://: one upload from a file in the local dir `scratch`), then its seal, made from the bytes as they
    were written (never read back)."""
    if not is_gcs(uri):
        with atomic_output(uri, durable=False) as f:
            out = SealedWriter(f)
            yield out
    else:
        local = Path(scratch) / f"sealed-{os.urandom(4).hex()}-{uri.rsplit('/', 1)[-1]}"
        try:
            with open(local, "wb") as f:
                out = SealedWriter(f)
                yield out
            write_file(local, uri)
        finally:
            local.unlink(missing_ok=True)
    write_bytes(uri + MAC_SUFFIX, out.pieces.seal(secret, uri), durable=False)


def block_cuts(size: int, block: int) -> list[int]:
    """Piece bounds every `block` bytes of a file of `size` bytes: for files read at any offset."""
    return [*range(0, size, block), size] if size else [0, 0]


def _digest_stream(f, cuts) -> _Pieces:
    """The pieces of a stream cut at `cuts` (its bounds, 0 first and its size last; None: one piece)."""
    pieces = _Pieces()
    for bound in (cuts[1:-1] if cuts else ()):
        while pieces.size < bound and (block := f.read(min(BLOCK, bound - pieces.size))):
            pieces.update(block)
        pieces.cut()
    while block := f.read(BLOCK):
        pieces.update(block)
    if cuts and pieces.size != cuts[-1]:
        raise ValueError(f"piece bounds end at {cuts[-1]}, the data at {pieces.size}")
    return pieces


def seal_file(path: str | os.PathLike, uri: str, secret: Secret, cuts=None) -> None:
    """Put the local file `path` at `uri` (a local path or gs:// URI), then its seal (uri + MAC_SUFFIX): a MAC over
    `uri` and the digests of the file's pieces (cuts: their bounds, 0 to its size; None: the whole file one piece),
    so the file is taken only where it was put and as it was written."""
    with open(path, "rb") as f:
        pieces = _digest_stream(f, cuts)
    if os.fspath(path) != uri:
        write_file(path, uri, durable=False)
    write_bytes(uri + MAC_SUFFIX, pieces.seal(secret, uri), durable=False)


def seal_bytes(uri: str, data: bytes, secret: Secret, cuts=None) -> None:
    """seal_file of bytes in hand."""
    pieces = _digest_stream(io.BytesIO(data), cuts)
    write_bytes(uri, data, durable=False)
    write_bytes(uri + MAC_SUFFIX, pieces.seal(secret, uri), durable=False)


def seal_json(uri: str, obj, secret: Secret) -> None:
    """A small staged record (a summary, a plan), written as storage.write_json writes it, sealed."""
    seal_bytes(uri, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), secret)


@dataclass(frozen=True)
class Sealed:
    """A staged file whose seal holds: its pieces' bounds and digests. Its bytes are checked as they are read:
    whole (`read`, `local`) or a range (`read`, `open`)."""
    uri: str
    bounds: tuple
    digests: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return self.bounds[-1]

    def _pieces(self, start: int, stop: int) -> tuple[int, int]:
        """The pieces [first, last) covering bytes [start, stop)."""
        first = max(0, bisect.bisect_right(self.bounds, start) - 1)
        last = max(first, bisect.bisect_left(self.bounds, stop))
        return min(first, len(self.bounds) - 2), last

    @contextlib.contextmanager
    def open(self, start: int = 0, stop: int | None = None):
        """A binary stream of bytes [start, stop), which must be piece bounds: each piece is checked as it streams
        and one that does not match raises BrokenSeal before its last bytes are handed on (so a caller writes
        nothing lasting until the stream is done)."""
        stop = self.size if stop is None else stop
        first, last = self._pieces(start, stop)
        if self.bounds[first] != start or self.bounds[last] != stop:
            raise ValueError(f"{self.uri}: bytes {start}-{stop} are not whole pieces")
        try:
            raw = open_read(self.uri, start, stop)
        except NanodataError:
            raise BrokenSeal(self.uri, "missing (its seal is there)") from None
        with raw, io.BufferedReader(_Checked(self, raw, first, last), BLOCK) as f:
            yield f

    def read(self, start: int = 0, stop: int | None = None) -> bytes:
        """Bytes [start, stop) (default: all, in one request: a small file), the pieces holding them read and
        checked."""
        if start == 0 and stop is None:
            data = read_bytes(self.uri)
            if data is None:
                raise BrokenSeal(self.uri, "missing (its seal is there)")
            self._check(io.BytesIO(data))
            return data
        stop = self.size if stop is None else stop
        first, last = self._pieces(start, stop)
        with self.open(self.bounds[first], self.bounds[last]) as f:
            data = f.read()
        return data[start - self.bounds[first]:stop - self.bounds[first]]

    def local(self, path: str | os.PathLike) -> Path:
        """A local path holding the whole file, checked: the staged file itself when local, else a download to
        `path`."""
        try:
            local = local_copy(self.uri, path)
        except FileNotFoundError:
            raise BrokenSeal(self.uri, "missing (its seal is there)") from None
        with open(local, "rb") as f:
            self._check(f)
        return local

    def _check(self, f) -> None:
        """All of a stream holding the file, checked against every piece (its size too)."""
        try:
            pieces = _digest_stream(f, self.bounds)
        except ValueError:  # another size
            raise BrokenSeal(self.uri, NOT_HOLDING) from None
        pieces.cut()
        if not hmac.compare_digest(bytes(pieces.digests), self.digests):
            raise BrokenSeal(self.uri, NOT_HOLDING)


class _Checked(io.RawIOBase):
    """Pieces [first, last) of a sealed file from `raw` (positioned at the first), each checked at its end."""

    def __init__(self, sealed: Sealed, raw, first: int, last: int):
        self._sealed, self._raw, self._piece, self._last = sealed, raw, first, last
        self._left, self._h = sealed.bounds[first + 1] - sealed.bounds[first] if first < last else 0, PIECE_DIGEST()
        self._settle()

    def readable(self) -> bool:
        return True

    def _settle(self) -> None:
        """Check every piece that is fully read (an empty one at once)."""
        while self._piece < self._last and self._left == 0:
            at = self._piece * DIGEST_BYTES
            if not hmac.compare_digest(self._h.digest(), self._sealed.digests[at:at + DIGEST_BYTES]):
                raise BrokenSeal(self._sealed.uri, NOT_HOLDING)
            self._piece += 1
            self._h = PIECE_DIGEST()
            if self._piece < self._last:
                self._left = self._sealed.bounds[self._piece + 1] - self._sealed.bounds[self._piece]

    def readinto(self, out) -> int:
        if self._piece >= self._last:
            return 0
        data = self._raw.read(min(len(out), self._left))
        if not data:
            raise BrokenSeal(self._sealed.uri, "shorter than its seal says")
        self._h.update(data)
        self._left -= len(data)
        self._settle()
        out[:len(data)] = data
        return len(data)


def sealed(uri: str, secret: Secret, required: bool = False) -> Sealed | None:
    """The file at `uri` under its seal, which holds (its bytes are checked as they are read); None when neither
    the file nor its seal is there (not written yet), unless `required`. BrokenSeal when the seal is missing or does
    not hold."""
    seal = read_bytes(uri + MAC_SUFFIX)
    if seal is None:
        there = exists(uri)
        if there or required:
            raise BrokenSeal(uri, "its seal is missing" if there else "missing")
        return None
    count = int.from_bytes(seal[len(SEAL_MAGIC) + MAC_BYTES:SEAL_HEAD], "little")
    digests_at = SEAL_HEAD + 8 * (count + 1)
    if len(seal) < SEAL_HEAD or seal[:len(SEAL_MAGIC)] != SEAL_MAGIC or len(seal) != digests_at + DIGEST_BYTES * count \
            or not secret.holds(seal[len(SEAL_MAGIC):SEAL_HEAD - 8], STAGED, uri.encode("utf-8", "surrogateescape"),
                                seal[SEAL_HEAD:digests_at], seal[digests_at:]):
        raise BrokenSeal(uri, NOT_HOLDING)
    return Sealed(uri, struct.unpack(f"<{count + 1}Q", seal[SEAL_HEAD:digests_at]), seal[digests_at:])


def read_sealed(uri: str, secret: Secret, required: bool = False) -> bytes | None:
    """A staged file's bytes, checked (see `sealed`); None also for one deleted from under its seal, whatever the
    seal, unless `required` (deleting both is always possible: a seal alone vouches for nothing)."""
    try:
        found = sealed(uri, secret, required)
        return None if found is None else found.read()
    except BrokenSeal:
        if required or exists(uri):
            raise
        return None


def read_sealed_json(uri: str, secret: Secret, required: bool = False):
    """A staged record (seal_json), checked (see `sealed`)."""
    data = read_sealed(uri, secret, required)
    return None if data is None else json.loads(data)


def read_sealed_jsons(uris, secret: Secret, required: bool = False) -> list:
    """read_sealed_json of each URI, in order, several at a time: the summaries of a build's many tasks."""
    return concurrently(lambda uri: read_sealed_json(uri, secret, required), uris)


def sealed_files(uris, secret: Secret) -> list[Sealed]:
    """sealed(required=True) of each URI, in order, several at a time: the files a task reads ranges of."""
    return concurrently(lambda uri: sealed(uri, secret, required=True), uris)


def checked_file(uri: str, path: str | os.PathLike, secret: Secret) -> Path | None:
    """A local path holding `uri`'s bytes (uri itself when local, else a download to `path`) when its seal holds;
    None (logged) when the file or its seal is missing, or the seal does not hold: for a file the caller makes
    again then."""
    try:
        found = sealed(uri, secret, required=True)
        return found.local(path)
    except BrokenSeal as exc:
        log.warning("staged %s: made again", exc)
        return None
