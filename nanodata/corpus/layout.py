"""The layout of a built corpus: the one place that knows its file names, its manifest and its commit markers.

    DIR/shard_00000.parquet ...   train shards (`shard_name`), then val_shard.parquet (`VAL_NAME`)
    DIR/manifest.json             `Manifest`: every shard with rows, bytes and checksums, the val shard, counts
    DIR/chunk_summary.json        `nanodata chunk --parquet-dir`'s summary (what OUTPUT.done holds for a JSONL run)
    DIR/_COMPLETE                 written last: the directory is whole (nanodata.storage.files.COMPLETE)
    DEST/latest.json              `Latest`: which build of DEST is the newest published, written after it

Which parquet file is validation: the manifest decides; else a file named `val*.parquet`; else the nanochat
convention, the last file by name (`split_names`). A manifest of another version than this code writes is refused
with one line saying which versions it reads, never half understood.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from nanodata.errors import NanodataError
from nanodata.storage.files import COMPLETE
from nanodata.storage.uri import exists, join_uri, read_bytes, write_bytes, write_json

MANIFEST = "manifest.json"
LATEST = "latest.json"
VAL_NAME = "val_shard.parquet"
CHUNK_SUMMARY = "chunk_summary.json"
MANIFEST_VERSION = 1

__all__ = ["CHUNK_SUMMARY", "COMPLETE", "LATEST", "MANIFEST", "MANIFEST_VERSION", "VAL_NAME", "Latest", "Manifest", "ShardEntry",
           "is_complete", "is_parquet_name", "mark_complete", "read_chunk_summary", "read_latest", "shard_name", "split_names", "write_latest"]


def is_complete(location) -> bool:
    """The directory (a local path or gs:// URI) was committed: its _COMPLETE is there."""
    return exists(join_uri(str(location), COMPLETE))


def mark_complete(location) -> None:
    """Commit a directory: the last write, after every file it holds and its manifest."""
    write_bytes(join_uri(str(location), COMPLETE), b"")


def read_chunk_summary(location) -> dict | None:
    """The chunk run's summary a corpus written by `nanodata chunk --parquet-dir` holds; None for other corpora."""
    data = read_bytes(join_uri(str(location), CHUNK_SUMMARY))
    return None if data is None else json.loads(data)


def shard_name(index: int) -> str:
    return f"shard_{index:05d}.parquet"


def is_parquet_name(name: str) -> bool:
    """A finished parquet file of a corpus (partials end in .tmp and never count)."""
    return name.endswith(".parquet")


@dataclass(frozen=True, kw_only=True)
class ShardEntry:
    """One parquet file of a built corpus, as the manifest lists it."""
    name: str
    rows: int | None = None
    bytes: int | None = None
    sha256: str | None = None
    crc32c: str | None = None  # base64 of the big-endian CRC32C, as GCS reports it
    tokens: int | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise NanodataError(f"manifest shard entry: name must be a non-empty string, not {self.name!r}")
        if self.rows is not None and (isinstance(self.rows, bool) or not isinstance(self.rows, int) or self.rows < 0):
            raise NanodataError(f"manifest shard {self.name}: rows must be an integer >= 0, not {self.rows!r}")

    @classmethod
    def from_json(cls, obj, where: str) -> ShardEntry:
        if not isinstance(obj, dict):
            raise NanodataError(f"{where}: malformed, a shard entry is {type(obj).__name__}, not an object")
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in obj.items() if k in known})
        except TypeError as exc:  # a required field missing
            raise NanodataError(f"{where}: malformed, expected shards[].name and val.name ({exc})") from None
        except NanodataError as exc:
            raise NanodataError(f"{where}: malformed, {exc}") from None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """manifest.json: written once, after every shard it lists and before _COMPLETE."""
    shards: tuple[ShardEntry, ...]
    val: ShardEntry | None
    total_rows: int | None = None
    bad_lines: dict = field(default_factory=dict)
    created_by: str = ""
    extra: dict = field(default_factory=dict)  # what a writer adds for its readers (counts of a build)
    version: int = MANIFEST_VERSION

    def __post_init__(self):
        check_version(self.version, MANIFEST)
        object.__setattr__(self, "shards", tuple(self.shards))

    @property
    def files(self) -> tuple[ShardEntry, ...]:
        """Every parquet file it lists: the train shards, then val."""
        return self.shards + ((self.val,) if self.val else ())

    def checksums(self) -> dict[str, str]:
        """{file name: crc32c} of the files listed with one."""
        return {entry.name: entry.crc32c for entry in self.files if entry.crc32c}

    @classmethod
    def from_json(cls, obj, where: str = MANIFEST) -> Manifest:
        if not isinstance(obj, dict):
            raise NanodataError(f"{where}: malformed, expected a JSON object, not {type(obj).__name__}")
        check_version(obj.get("version"), where)
        shards = obj.get("shards")
        if not isinstance(shards, list):
            raise NanodataError(f"{where}: malformed, expected shards[].name and val.name (shards is "
                                f"{type(shards).__name__})")
        val = obj.get("val")
        known = {f.name for f in fields(cls)}
        return cls(shards=tuple(ShardEntry.from_json(s, where) for s in shards),
                   val=ShardEntry.from_json(val, where) if val else None,
                   total_rows=obj.get("total_rows"),
                   bad_lines=obj.get("bad_lines") or {}, created_by=obj.get("created_by") or "",
                   extra={k: v for k, v in obj.items() if k not in known})

    @classmethod
    def from_bytes(cls, data: bytes, where: str = MANIFEST) -> Manifest:
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise NanodataError(f"{where}: invalid JSON ({exc})") from None
        return cls.from_json(obj, where)

    def to_json(self) -> dict:
        return {"version": self.version, "shards": [s.to_json() for s in self.shards],
                "val": self.val.to_json() if self.val else None, "bad_lines": self.bad_lines,
                "total_rows": self.total_rows, "created_by": self.created_by, **self.extra}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2).encode() + b"\n"


def check_version(version, where: str) -> None:
    if version != MANIFEST_VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > MANIFEST_VERSION
        raise NanodataError(f"{where}: manifest version {version!r}; this nanodata reads version {MANIFEST_VERSION} "
                            f"only ({'upgrade nanodata' if newer else 'rebuild the corpus with this version'})")


@dataclass(frozen=True, kw_only=True)
class Latest:
    """DEST/latest.json: the newest published build of a destination, written after the build's _COMPLETE."""
    key: str
    uri: str
    info: dict = field(default_factory=dict)  # counts and Params of the build, for people and the UI

    @classmethod
    def from_json(cls, obj, where: str = LATEST) -> Latest:
        if not isinstance(obj, dict) or not isinstance(obj.get("key"), str) or not isinstance(obj.get("uri"), str):
            raise NanodataError(f"{where}: malformed, expected an object with string 'key' and 'uri'")
        return cls(key=obj["key"], uri=obj["uri"], info={k: v for k, v in obj.items() if k not in ("key", "uri")})

    def to_json(self) -> dict:
        return {**self.info, "key": self.key, "uri": self.uri}


def read_latest(dest: str) -> Latest | None:
    """DEST/latest.json, checked, or None when DEST has published nothing yet."""
    uri = join_uri(dest, LATEST)
    data = read_bytes(uri)
    if data is None:
        return None
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise NanodataError(f"{uri}: invalid JSON ({exc})") from None
    return Latest.from_json(obj, uri)


def write_latest(dest: str, latest: Latest) -> None:
    """Point DEST/latest.json at a build: only after the build's _COMPLETE, as the last write of a publish."""
    write_json(join_uri(dest, LATEST), latest.to_json())


def split_names(names: list[str], manifest: Manifest | None, *, explicit_val: bool = False
                ) -> tuple[list[str], list[str]]:
    """The train/val rule over the sorted parquet file names of one directory: (train names, val names).
    explicit_val: val only from the manifest or val*.parquet, never the last file (a corpus still growing)."""
    if manifest is not None:
        return sorted(entry.name for entry in manifest.shards), [manifest.val.name] if manifest.val else []
    val = [name for name in names if name.startswith("val")]
    if val or explicit_val:
        return [name for name in names if name not in val], val
    return names[:-1], names[-1:]
