"""URI helpers over nanodata.storage: a URI is a gs://bucket/prefix or a local path.

Large files always travel as whole directories through storage.sync (streamed, crc32c-checked,
_COMPLETE last), so every step's big output lives in a directory of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

from nanodata import storage
from nanodata.errors import NanodataError


join = storage.join_uri


def is_gcs(uri: str) -> bool:
    return uri.startswith("gs://")


def check_uri(name: str, uri) -> str:
    """A run's URI argument (a DAG Param), or a one-line NanodataError saying in words what it must be:
    an absolute local path or gs://bucket/prefix with a valid bucket name."""
    if not isinstance(uri, str) or not uri.strip():
        raise NanodataError(f"{name}: empty; give an absolute path or gs://bucket/prefix")
    try:
        local = storage.parse_gs(uri) is None  # checks the bucket name of a gs:// URI
    except NanodataError as exc:
        raise NanodataError(f"{name}: {exc}") from None
    if local and not uri.startswith("/"):
        raise NanodataError(f"{name} {uri!r}: not an absolute path or gs://bucket/prefix")
    return uri


def read_json(uri: str) -> dict | None:
    data = storage.read_bytes(uri)
    return None if data is None else json.loads(data)


def write_json(uri: str, obj) -> None:
    storage.write_bytes(uri, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode())


def fetch_dir(uri: str, local: Path) -> Path:
    """A local directory holding uri's files: uri itself when local, else a copy in `local`."""
    if not is_gcs(uri):
        return Path(uri)
    local.mkdir(parents=True, exist_ok=True)
    _check(storage.sync(uri, str(local)), uri)
    return local


def put_dir(local: Path, uri: str) -> dict:
    """Copy a local dir to uri; files already there are skipped and _COMPLETE goes last."""
    result = storage.sync(str(local), uri)
    _check(result, uri)
    return result


def _check(result: dict, uri: str) -> None:
    if result.get("failed"):
        raise OSError(f"copy to/from {uri}: {result['failed']} file(s) failed: {result.get('failed_names')}")
