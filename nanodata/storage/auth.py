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
`seal_file` / `checked_file`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.storage.files import file_digest
from nanodata.storage.uri import local_copy, read_bytes, write_bytes, write_file

log = logging.getLogger(__name__)

SECRET_ENV = "NANODATA_CACHE_SECRET"
SECRET_BYTES = 32          # of the secret file
MIN_SECRET_CHARS = 16      # of a secret given as text (the Variable, the environment variable)
MAC_BYTES = 32
MAC_SUFFIX = ".mac"        # a staged file's seal, beside it
SEAL_MAGIC = b"nds1"


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


def _file_mac(secret: Secret, uri: str, path: Path) -> bytes:
    """The seal's MAC: over where the file is put and its bytes (their streamed sha256)."""
    return secret.mac(STAGED, uri.encode("utf-8", "surrogateescape"), file_digest(path).encode())


def seal_file(path: str | os.PathLike, uri: str, secret: Secret) -> None:
    """Put the local file `path` at `uri` (a local path or gs:// URI), then its seal (uri + MAC_SUFFIX): a MAC over
    `uri` and the bytes, so the file is taken only where it was put and as it was written."""
    path = Path(path)
    mac = _file_mac(secret, uri, path)
    if os.fspath(path) != uri:
        write_file(path, uri)
    write_bytes(uri + MAC_SUFFIX, SEAL_MAGIC + mac)


def checked_file(uri: str, path: str | os.PathLike, secret: Secret) -> Path | None:
    """A local path holding `uri`'s bytes (uri itself when local, else a download to `path`) when its seal holds;
    None (logged) when the file or its seal is missing, or the seal does not hold: written elsewhere, edited, or
    sealed with another secret."""
    seal = read_bytes(uri + MAC_SUFFIX)
    if seal is None:
        log.warning("staged file %s: its seal is missing: made again", uri)
        return None
    try:
        local = local_copy(uri, path)
    except FileNotFoundError:  # a file gone from under its seal
        log.warning("staged file %s: missing: made again", uri)
        return None
    if len(seal) != len(SEAL_MAGIC) + MAC_BYTES or seal[:len(SEAL_MAGIC)] != SEAL_MAGIC \
            or not hmac.compare_digest(seal[len(SEAL_MAGIC):], _file_mac(secret, uri, local)):
        log.warning("staged file %s: its seal does not hold (written elsewhere, edited, or sealed with another "
                    "secret): made again", uri)
        return None
    return local
