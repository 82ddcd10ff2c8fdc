"""Google Cloud Storage access: bucket-name rules, gs:// URIs, one client per thread, paged listings, and
`Bucket`, the one reader of objects under a prefix (pinned versions, ranged reads).

Every call here runs under the one retry policy (nanodata.storage.retry); the client's own retry is off.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from urllib.parse import quote

from nanodata.errors import NanodataError
from nanodata.storage.retry import CorruptTransfer, is_network_error, one_line, with_retries

RESUMABLE_THRESHOLD = 8 * 1024 * 1024  # larger files use a chunked resumable upload
RESUMABLE_CHUNK = 8 * 1024 * 1024  # must be a multiple of 256 KiB
TIMEOUT = (10, 120)  # (connect, read) seconds per HTTP request


# GCS bucket names: lowercase letters, digits, '.', '-', '_', starting and ending with a letter or digit;
# 3-63 characters, or up to 222 with dots when each dot-separated part has at most 63
BUCKET_NAME = re.compile(r"[a-z0-9](?:[a-z0-9._-]*[a-z0-9])?")


def valid_bucket_name(name: str) -> bool:
    parts = name.split(".")
    return (BUCKET_NAME.fullmatch(name) is not None and 3 <= len(name) <= (222 if len(parts) > 1 else 63)
            and all(1 <= len(part) <= 63 for part in parts))


def parse_gs(uri: str) -> tuple[str, str] | None:
    """gs://bucket/prefix → (bucket, 'prefix/'); a local path → None; a malformed gs:// URI → NanodataError."""
    if not uri.startswith("gs://"):
        if uri[:3].lower() == "gs:":  # gs:/b, GS://b: a typo, not a local directory named 'gs:'
            raise NanodataError(f"{uri!r}: malformed gs:// URI (expected gs://bucket/prefix)")
        return None
    bucket, _, prefix = uri[len("gs://"):].partition("/")
    if not bucket:
        raise NanodataError(f"{uri!r}: no bucket name (expected gs://bucket/prefix)")
    if not valid_bucket_name(bucket):
        raise NanodataError(f"{uri!r}: invalid bucket name {bucket!r}: GCS bucket names are 3-63 characters of "
                            f"lowercase letters, digits, '.', '-' and '_', starting and ending with a letter or digit")
    prefix = prefix.strip("/")
    if prefix and (any(p in ("", ".", "..") for p in prefix.split("/")) or "\n" in prefix or "\r" in prefix):
        raise NanodataError(f"{uri!r}: malformed gs:// URI (empty, '.' or '..' path component, or a line break)")
    return bucket, (prefix + "/" if prefix else "")


_local = threading.local()


def gcs_client():
    """A client per thread, pointed at STORAGE_EMULATOR_HOST when set (anonymous), else ADC."""
    from google.cloud import storage

    # The client would otherwise GET each bucket's metadata in a background thread, only to label OpenTelemetry
    # spans: an extra request per bucket and thread, retried by the client's own policy instead of ours.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    cached = getattr(_local, "client", None)
    if cached is not None and cached[0] == emulator:
        return cached[1]
    if emulator:
        from google.auth.credentials import AnonymousCredentials

        client = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "nanodata-emulator"),
                                credentials=AnonymousCredentials())
    else:
        import google.auth.exceptions

        try:
            client = storage.Client()
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise NanodataError(f"no Google credentials for gs:// ({exc}); run `gcloud auth application-default "
                                f"login`, set GOOGLE_APPLICATION_CREDENTIALS, or STORAGE_EMULATOR_HOST") from None
    _local.client = (emulator, client)
    return client


def read_object(bucket: str, name: str) -> bytes | None:
    """A small object's bytes (None when there is none) in one GET, retried: through a urllib3 pool of this thread
    with its client's credentials, not a Blob download (a third of its CPU: no Blob, no requests session looking up
    proxies in the environment per request), for many small objects read at once (nanodata.storage.entries).
    The transfer's checksum is not checked: its caller checks what it reads (an entry's MAC)."""
    import urllib3
    from google.api_core.exceptions import from_http_status

    client = gcs_client()
    cached = getattr(_local, "reader", None)
    if cached is None or cached[0] is not client:
        from google.auth.transport.urllib3 import AuthorizedHttp
        from requests.utils import get_environ_proxies

        # the proxy the client's requests session would take from the environment, looked up once, not per request
        proxy = get_environ_proxies(client.api_endpoint).get(client.api_endpoint.split(":", 1)[0])
        pool = urllib3.ProxyManager(proxy) if proxy else urllib3.PoolManager()
        cached = _local.reader = (client, AuthorizedHttp(client._credentials, http=pool))
    url = f"{client.api_endpoint}/download/storage/v1/b/{bucket}/o/{quote(name, safe='~')}?alt=media"
    label = f"gs://{bucket}/{name}"

    def attempt() -> bytes | None:
        try:
            response = cached[1].request("GET", url, retries=False, timeout=urllib3.Timeout(*TIMEOUT))
        except urllib3.exceptions.HTTPError as exc:  # refused, reset, timed out, a body cut short: retried
            raise ConnectionError(f"read {label}: {exc}") from exc
        if response.status == 404:
            return None
        if response.status != 200:
            raise from_http_status(response.status, f"read {label}: {response.data[:200]!r}")
        return response.data

    return with_retries(attempt, f"read {label}")


def iter_blobs(bucket: str, prefix: str, what: str, delimiter: str | None = None, **retry):
    """The objects under a prefix, streamed page by page (never held whole), each page fetched under the one
    retry policy (`retry`: attempts, backoff, deadline): a listing's pages are requested while it is iterated,
    so wrapping the list call alone would retry nothing."""
    token = None
    while True:
        def fetch_page(token=token):
            blobs = gcs_client().list_blobs(bucket, prefix=prefix, delimiter=delimiter, page_token=token,
                                            retry=None, timeout=TIMEOUT)
            page = next(blobs.pages, None)
            return ([] if page is None else list(page)), blobs.next_page_token

        items, token = with_retries(fetch_page, what, **retry)
        yield from items
        if not token:
            return


def list_blobs(uri: str, delimiter: str | None = None, **retry) -> list:
    """Every object under gs://bucket/prefix (only those directly under it with delimiter="/"), retried; a missing
    bucket or a listing that still fails is one NanodataError naming the URI."""
    from google.api_core.exceptions import NotFound

    bucket, prefix = parse_gs(uri)
    try:
        return list(iter_blobs(bucket, prefix, f"list {uri}", delimiter, **retry))
    except NotFound:
        raise NanodataError(f"{uri}: bucket {bucket!r} does not exist") from None
    except Exception as exc:
        if not is_network_error(exc):
            raise
        raise NanodataError(f"{uri}: cannot list the objects: {one_line(exc)}") from None


# -- reading objects -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectInfo:
    size: int
    generation: int
    crc32c: str

    def __str__(self) -> str:
        return f"generation {self.generation}, {self.size} bytes, crc32c {self.crc32c}"


class ObjectMissing(CorruptTransfer):
    """A listed object that is not there right now: retried like a corrupt transfer (a re-upload may be on)."""


class Bucket:
    """Read-only access to the objects directly under gs://bucket/prefix, every request retried."""

    def __init__(self, uri: str, stop: threading.Event | None = None):
        self.stop = stop  # set: a failed request is not retried (its reader is closing)
        self.bucket, self.prefix = parse_gs(uri)
        self.uri = f"gs://{self.bucket}/{self.prefix}".rstrip("/")

    def label(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def list(self) -> dict[str, ObjectInfo]:
        """{name: info} of the objects directly under the prefix (not in sub-prefixes)."""
        return {blob.name[len(self.prefix):]: object_info(blob) for blob in list_blobs(self.uri, delimiter="/")}

    def stat(self, name: str) -> ObjectInfo | None:
        def attempt():
            return gcs_client().bucket(self.bucket).get_blob(self.prefix + name, retry=None, timeout=TIMEOUT)

        blob = self._call(attempt, f"stat {self.label(name)}")
        return None if blob is None else object_info(blob)

    def current(self, name: str, was: ObjectInfo | None) -> ObjectInfo:
        """The object's version now. Missing is retried with backoff (a re-upload may be under way); still
        missing is an error naming the object (and `was`, the version listed before, if any)."""
        label = self.label(name)

        def attempt() -> ObjectInfo:
            blob = gcs_client().bucket(self.bucket).get_blob(self.prefix + name, retry=None, timeout=TIMEOUT)
            if blob is None:
                raise ObjectMissing(f"{label}: not found")
            return object_info(blob)

        try:
            return self._call(attempt, f"stat {label}")
        except ObjectMissing:
            raise (replaced(label, was, None) if was else NanodataError(f"{label}: no such object")) from None

    def read(self, name: str, info: ObjectInfo, start: int, stop: int) -> bytes:
        """Bytes [start, stop) of the version `info` of an object; another version is an error, never read."""
        from google.api_core.exceptions import NotFound

        label = self.label(name)

        def attempt() -> bytes:
            blob = gcs_client().bucket(self.bucket).blob(self.prefix + name, generation=info.generation)
            try:
                data = blob.download_as_bytes(start=start, end=stop - 1, checksum=None, retry=None, timeout=TIMEOUT)
            except NotFound:  # real GCS: this generation is gone (replaced or deleted)
                self._confirm(name, info)
                raise ObjectMissing(f"{label}: not found (listed as {info})") from None
            if blob.generation is None:  # the server did not say which version it sent (the emulator serves
                self._confirm(name, info)  # the current one whatever generation is asked for): ask after the read
            elif blob.generation != info.generation:
                raise replaced(label, info, self.stat(name))
            if len(data) != stop - start:  # a dropped body
                raise CorruptTransfer(f"{label}: {len(data)} bytes for bytes {start}-{stop - 1}")
            return data

        try:
            return self._call(attempt, f"read {label} bytes {start}-{stop - 1}")
        except ObjectMissing:
            raise NanodataError(f"{label}: the object is gone from the bucket (it was listed as {info})") from None
        except CorruptTransfer as exc:
            raise NanodataError(f"{label}: {exc} on every attempt") from None

    def _confirm(self, name: str, info: ObjectInfo) -> None:
        """The object is still the version `info`; else one line naming both versions, or ObjectMissing (retried:
        a re-upload may be under way) while it is gone."""
        now = self.stat(name)
        if now is None:
            raise ObjectMissing(f"{self.label(name)}: not found (listed as {info})")
        if now != info:
            raise replaced(self.label(name), info, now)

    def _call(self, fn, what: str):
        try:
            return with_retries(fn, what, stop=self.stop)
        except (NanodataError, CorruptTransfer):
            raise
        except Exception as exc:
            if not is_network_error(exc):
                raise
            raise NanodataError(f"{what}: {one_line(exc)}") from None


def object_info(blob) -> ObjectInfo:
    return ObjectInfo(int(blob.size), int(blob.generation), blob.crc32c)


def replaced(label: str, was: ObjectInfo, now: ObjectInfo | None) -> NanodataError:
    if now is None:
        return NanodataError(f"{label}: the object is gone from the bucket (it was listed as {was})")
    return NanodataError(f"{label} was replaced while the loader read the corpus: it was {was}, it is {now}; "
                         f"restart the loader (a resume state refuses a changed file)")
