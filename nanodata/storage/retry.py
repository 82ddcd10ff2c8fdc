"""The one retry policy for network transfers (GCS and plain HTTP), and the one way a downloaded file lands.

Every GCS call (nanodata.storage and the modules that list buckets) and every HTTP download (nanodata.pipeline.download)
runs under `with_retries`: a `google.api_core.retry.Retry` whose predicate retries only transient failures
(`is_transient`: 408, 429, 5xx, dropped connections, timeouts, corrupt transfers), with exponential backoff and
full jitter (the first wait is up to `backoff` seconds, doubling, never more than MAX_DELAY), at most `attempts`
tries and, optionally, a deadline. The clients themselves are called with `retry=None`, so nothing retries twice.

A downloaded file lands through `land`: the bytes go to NAME.tmp, are verified, then committed (fsync + rename),
so a final name only ever holds verified bytes; a full disk is one plain error and is never retried.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from nanodata.errors import NanodataError
from nanodata.ranges import ATTEMPTS, BACKOFF_S
from nanodata.storage.files import commit, disk_errors, temp_name

log = logging.getLogger(__name__)

MAX_DELAY = BACKOFF_S.hi  # seconds: the longest wait between two attempts
RETRIED_STATUS = frozenset({408, 429})  # request timeout, rate limit; every 5xx is retried too


class CorruptTransfer(Exception):
    """The bytes that arrived are not what the source has (crc32c mismatch, not parquet): retried like a drop."""


def _http_status(exc: BaseException) -> int:
    code = getattr(exc, "code", None)  # google.api_core exceptions carry the HTTP status here
    if isinstance(code, int):
        return code
    return getattr(getattr(exc, "response", None), "status_code", None) or 0


def is_transient(exc: BaseException) -> bool:
    """Whether another attempt may succeed: the predicate of the one retry policy."""
    import requests
    from google.api_core import exceptions as api
    from google.auth.exceptions import TransportError
    from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

    if isinstance(exc, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                        ConnectionError, TimeoutError, TransportError, DataCorruption, CorruptTransfer,
                        api.TooManyRequests, api.ServerError)):
        return True
    if isinstance(exc, (api.GoogleAPICallError, InvalidResponse, requests.HTTPError)):
        status = _http_status(exc)
        return status in RETRIED_STATUS or status >= 500
    return False


def is_network_error(exc: BaseException) -> bool:
    """A failure of the network or the server (retried or not), as opposed to a bug or a local problem."""
    import requests
    from google.api_core import exceptions as api
    from google.auth.exceptions import TransportError

    return is_transient(exc) or isinstance(exc, (api.GoogleAPICallError, api.RetryError, requests.RequestException,
                                                 TransportError))


def one_line(exc: BaseException) -> str:
    """'Type: message' on one line, cut short: server errors can quote whole response bodies."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def retry_policy(what: str, attempts: int = 5, backoff: float = 0.5, deadline: float | None = None, stop=None):
    """The Retry for one operation called `what` in the logs. Make one per operation: it counts its attempts
    (api_core's Retry itself only has a deadline), and gives up after `attempts` tries or `deadline` seconds,
    or at the first failure once `stop` (a threading.Event: a closing loader's) is set."""
    from google.api_core.retry import Retry

    failures = 0

    def retryable(exc: Exception) -> bool:
        nonlocal failures
        failures += 1
        return failures < attempts and is_transient(exc) and not (stop is not None and stop.is_set())

    def log_retry(exc: Exception) -> None:
        # Retry draws the jittered wait after this call: log its ceiling, the wait is uniform in [0, ceiling]
        ceiling = min(backoff * 2 ** (failures - 1), MAX_DELAY)
        log.warning("%s: %s; retry %d/%d in up to %.2fs", what, one_line(exc), failures, attempts - 1, ceiling)

    return Retry(predicate=retryable, initial=backoff, maximum=MAX_DELAY, multiplier=2.0, timeout=deadline,
                 on_error=log_retry)


def with_retries(fn, what: str, attempts: int = 5, backoff: float = 0.5, deadline: float | None = None, stop=None):
    """fn() under the one retry policy; raises fn's last error (or api_core's RetryError past the deadline)."""
    return retry_policy(what, attempts, backoff, deadline, stop)(fn)()


MAX_ATTEMPTS = ATTEMPTS.hi  # beyond this a retry loop is a hang, not a policy


def check_range(name: str, value, low: float, high: float = math.inf, *, above: bool = False) -> None:
    """A finite number in [low, high] ((low, high] with above=True), else one line naming the parameter."""
    try:
        ok = (isinstance(value, (int, float)) and math.isfinite(value) and value <= high
              and (value > low if above else value >= low))
    except OverflowError:  # an int past float range
        ok = False
    if not ok:
        bound = f"between {low:g} and {high:g}" if high < math.inf else f"{'>' if above else '>='} {low:g}"
        raise NanodataError(f"{name} must be {bound}, not {value!r}")


def check_retry_args(attempts, backoff, deadline=None, *, backoff_flag: str = "--backoff") -> None:
    check_range("--attempts", attempts, 1, MAX_ATTEMPTS)
    check_range(backoff_flag, backoff, 0, MAX_DELAY)
    if deadline is not None:
        check_range("--deadline", deadline, 0, above=True)


def land(path: str | Path, fill, verify) -> None:
    """fill(f) writes a download into path's temp file; verify(tmp) raises CorruptTransfer if the bytes are
    wrong; only then are they committed as `path`. A failed attempt leaves nothing behind."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        with disk_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                fill(f)
        verify(tmp)
        commit(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
