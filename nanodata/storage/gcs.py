"""Google Cloud Storage access: bucket-name rules, gs:// URIs, one client per thread, paged listings.

Every call here runs under the one retry policy (nanodata.storage.retry); the client's own retry is off.
"""

from __future__ import annotations

import os
import re
import threading

from nanodata.errors import NanodataError
from nanodata.storage.retry import is_network_error, one_line, with_retries

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


def iter_blobs(bucket: str, prefix: str, what: str, delimiter: str | None = None, **retry):
    """The objects under a prefix, streamed page by page (never held whole), each page fetched under the one
    retry policy (`retry`: attempts, backoff, deadline): a listing's pages are requested while it is iterated,
    so wrapping the list call alone would retry nothing."""
    token = None
    while True:
        def fetch_page():
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
