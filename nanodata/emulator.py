"""A real gcp-storage-emulator in a child process, for tests, benchmarks and local demos.

The emulator runs as its own process (never imported here) so that stopping it is a real
outage: open connections drop and new ones are refused, exactly what a flaky network
does to a sync. Data lives on disk under `root`, so a stop/start keeps every object.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import requests

from nanodata.errors import NanodataError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GcsEmulator:
    """`with GcsEmulator() as emu:` → emulator answering at `emu.host` (set STORAGE_EMULATOR_HOST to it)."""

    def __init__(self, port: int = 0, root: str | os.PathLike | None = None, startup_timeout: float = 30.0):
        self.port = port or free_port()  # fixed for the object's life, so a restart keeps the same URL
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

    def start(self) -> "GcsEmulator":
        if self.running:
            return self
        cmd = [sys.executable, "-m", "gcp_storage_emulator", "--data-dir", self.root,
               "start", "--host", "127.0.0.1", "--port", str(self.port), "--quiet"]
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)  # a Ctrl-C in the terminal is ours to handle
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NanodataError(f"gcs emulator on port {self.port} exited at startup "
                                    f"(code {self._proc.returncode}); log: {self._log_tail()}")
            try:
                if requests.get(self.host + "/", timeout=1).ok:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise NanodataError(f"gcs emulator on port {self.port} did not answer within {self.startup_timeout}s")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def create_bucket(self, name: str) -> str:
        resp = requests.post(f"{self.host}/storage/v1/b", params={"project": "nanodata"},
                             json={"name": name}, timeout=10)
        if resp.status_code not in (200, 409):  # 409: already there, which is what the caller wanted
            raise NanodataError(f"gcs emulator: creating bucket {name!r} failed: {resp.status_code} {resp.text[:200]}")
        return name

    def _log_tail(self, n: int = 800) -> str:
        try:
            with open(self._log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace").strip()
        except OSError:
            return "(no log)"

    def close(self) -> None:
        self.stop()
        atexit.unregister(self.stop)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "GcsEmulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
