"""A real gcp-storage-emulator in a child process, for tests, benchmarks and local demos.

The emulator runs as its own process (never imported here) so that stopping it is a real
outage: open connections drop and new ones are refused, exactly what a flaky network
does to a sync. Data lives on disk under `root`, so a stop/start keeps every object.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import requests

from nanodata.errors import NanodataError

# Runs the emulator's own main() with two changes to its stdlib HTTP server: the listen backlog goes
# from 5 to 128 (a client with more parallel connections than 5 otherwise sees resets and 1 s SYN
# retransmits that real GCS never causes), and it prints the port it bound, so it can bind port 0
# itself and no other process can take the port between our choosing it and the bind.
LAUNCH = """
import http.server, socketserver, sys
socketserver.TCPServer.request_queue_size = 128
_bind = http.server.HTTPServer.server_bind
def server_bind(self):
    _bind(self)
    print("listening on port", self.server_address[1], flush=True)
http.server.HTTPServer.server_bind = server_bind
from gcp_storage_emulator.__main__ import main
main(sys.argv[1:])
"""


def stop_process(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM, then SIGKILL past `timeout` seconds: a server a test started is gone when this returns."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class GcsEmulator:
    """`with GcsEmulator() as emu:` → emulator answering at `emu.host` (set STORAGE_EMULATOR_HOST to it)."""

    def __init__(self, port: int = 0, root: str | os.PathLike | None = None, startup_timeout: float = 30.0,
                 prelude: str = ""):
        self.port = port  # 0: the first start picks a free one; restarts keep it, so the URL stays valid
        self.prelude = prelude  # code run in the emulator's process before it starts (a benchmark's changes)
        self._own_root = root is None
        self.root = tempfile.mkdtemp(prefix="nanodata-gcs-") if root is None else os.fspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen | None = None
        self._log_path = os.path.join(self.root, "emulator.log")
        atexit.register(self.stop)  # never leave an orphan emulator behind a crashed test run

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> GcsEmulator:
        if self.running:
            return self
        cmd = [sys.executable, "-c", self.prelude + LAUNCH, "--data-dir", self.root,
               "start", "--host", "127.0.0.1", "--port", str(self.port), "--quiet"]
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)  # a Ctrl-C in the terminal is ours to handle
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NanodataError(f"gcs emulator (port {self.port or 'any'}) exited at startup "
                                    f"(code {self._proc.returncode}); log: {self._log_tail()}")
            bound = re.search(rb"listening on port (\d+)", self._log_bytes())
            if bound:
                self.port = int(bound.group(1))
                try:
                    if requests.get(self.host + "/", timeout=1).ok:
                        return self
                except requests.RequestException:
                    pass
            time.sleep(0.05)
        self.stop()
        raise NanodataError(f"gcs emulator (port {self.port or 'any'}) did not answer within {self.startup_timeout}s; "
                            f"log: {self._log_tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc, timeout=5)

    def kill(self) -> None:
        """SIGKILL, no goodbye: the endpoint is gone as when its machine dies (fault tests); start() brings it back."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the launcher and anything it started
            proc.wait()

    def create_bucket(self, name: str) -> str:
        resp = requests.post(f"{self.host}/storage/v1/b", params={"project": "nanodata"},
                             json={"name": name}, timeout=10)
        if resp.status_code not in (200, 409):  # 409: already there, which is what the caller wanted
            raise NanodataError(f"gcs emulator: creating bucket {name!r} failed: {resp.status_code} {resp.text[:200]}")
        return name

    def _log_bytes(self) -> bytes:
        try:
            with open(self._log_path, "rb") as f:
                return f.read()
        except OSError:
            return b""

    def _log_tail(self, n: int = 800) -> str:
        return self._log_bytes()[-n:].decode(errors="replace").strip() or "(empty)"

    def close(self) -> None:
        self.stop()
        atexit.unregister(self.stop)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> GcsEmulator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
