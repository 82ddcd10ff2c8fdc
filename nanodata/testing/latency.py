"""A TCP proxy that adds a fixed one-way delay to what a client sends: a local server (the GCS emulator) answering as
far away as a real one, for benchmarks and tests of code whose cost is round trips.

Each byte the client sends reaches the server `delay` seconds after it arrived, in order (bytes sent close together
stay close together, as on a long wire, so a request costs `delay` once however many packets carry it); answers come
back at once. The proxy runs as its own process (`python -m nanodata.testing.latency`), so its work never competes
for the measured process's interpreter lock.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tempfile
import time

from nanodata.errors import NanodataError
from nanodata.testing.emulator import stop_process

READ_BLOCK = 1 << 16
# GcsEmulator(prelude=...): the emulator keeps its object metadata in memory only. It otherwise writes all of it
# out again on every upload, so n uploads cost O(n^2) (10,000 cache entries: a quarter of an hour); reads are
# served as before. For a benchmark's emulator, which is never restarted.
METADATA_IN_MEMORY = ("from gcp_storage_emulator.storage import Storage\n"
                      "Storage._write_config_to_file = lambda self: None\n")


async def _delayed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy reader to writer, each block sent `delay` seconds after it arrived."""
    queue: asyncio.Queue = asyncio.Queue()

    async def receive() -> None:
        while block := await reader.read(READ_BLOCK):
            queue.put_nowait((time.monotonic() + delay, block))
        queue.put_nowait((0.0, b""))

    receiving = asyncio.ensure_future(receive())
    try:
        while True:
            due, block = await queue.get()
            if not block:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(block)
            await writer.drain()
    finally:
        receiving.cancel()
        writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while block := await reader.read(READ_BLOCK):
            writer.write(block)
            await writer.drain()
    finally:
        writer.close()


async def _serve(upstream_port: int, delay: float) -> None:
    async def connection(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_delayed(client_reader, server_writer, delay), _copy(server_reader, client_writer),
                             return_exceptions=True)  # a reset on either side ends the connection, not the proxy

    server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=512)
    print("listening on port", server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


class LatencyProxy:
    """`with LatencyProxy(upstream_port, delay) as proxy:` -> proxy.host (http://127.0.0.1:PORT) reaches the server on
    upstream_port with `delay` seconds added to every request."""

    def __init__(self, upstream_port: int, delay: float, startup_timeout: float = 30.0):
        self.upstream_port, self.delay, self.startup_timeout = upstream_port, delay, startup_timeout
        self.port = 0
        self._log = tempfile.TemporaryFile()
        self._proc: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LatencyProxy:
        self._proc = subprocess.Popen([sys.executable, "-m", __name__, str(self.upstream_port), str(self.delay)],
                                      stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._log.seek(0)
            said = self._log.read()
            bound = re.search(rb"listening on port (\d+)", said)
            if bound:
                self.port = int(bound.group(1))
                return self
            if self._proc.poll() is not None:
                raise NanodataError(f"latency proxy exited at startup (code {self._proc.returncode}): "
                                    f"{said[-400:].decode(errors='replace')}")
            time.sleep(0.02)
        self.__exit__()
        raise NanodataError(f"latency proxy did not start within {self.startup_timeout}s")

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            stop_process(self._proc, timeout=5)
            self._proc = None
        self._log.close()


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), float(sys.argv[2])))
