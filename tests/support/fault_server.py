"""A real HTTP server on 127.0.0.1 (a thread) that serves files from a directory, or forwards to another
server (a GCS emulator), and injects faults.

`server.faults[name]` is a list of faults applied to successive GETs of that file, then the file is
served normally: "500" (or any other status code: "503", "429", "408", "404"), "drop" (connection closed
before any response), "truncate" (full Content-Length announced, half the body sent, connection closed),
"cut" (no Content-Length, half the body, then close: only the parquet footer check can notice), "garbage"
(a 200 whose body is not parquet).
As a proxy (`upstream=URL`), every request of any method goes to upstream, except that each of the next
requests takes the next fault of `server.next_faults` (a status code or "drop"), whatever its path.
`server.requests` lists every request ("METHOD /path") of any method, so a test can show that a command
made none, or count the attempts of one that failed.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "content-encoding", "keep-alive"}


class FaultServer:
    def __init__(self, root: Path | None = None, upstream: str | None = None):
        self.root = Path(root) if root is not None else None
        self.upstream = upstream
        self.faults: dict[str, list[str]] = {}
        self.next_faults: list[str] = []
        self.hits: Counter = Counter()
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_fault(self, name: str) -> str | None:
        with self._lock:
            self.hits[name] += 1
            queue = self.next_faults if self.upstream else self.faults.get(name)
            return queue.pop(0) if queue else None

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def parse_request(self):
                parsed = super().parse_request()
                if parsed:
                    server.requests.append(f"{self.command} {self.path}")
                return parsed

            def fail(self, fault: str) -> None:
                self.close_connection = True
                if fault != "drop":
                    self.send_error(int(fault))

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = server._next_fault(self.path)
                if fault:
                    return self.fail(fault)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
                got = requests.request(self.command, server.upstream + self.path, data=body, headers=headers,
                                       allow_redirects=False, timeout=60)
                self.send_response(got.status_code)
                for key, value in got.headers.items():
                    if key.lower() not in HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(got.content)))
                self.end_headers()
                self.wfile.write(got.content)

            do_POST = do_PUT = do_PATCH = do_DELETE = forward

            def do_GET(self):
                if server.upstream:
                    return self.forward()
                name = self.path.lstrip("/")
                fault = server._next_fault(name)
                path = server.root / name
                if fault and fault not in ("truncate", "cut", "garbage"):
                    return self.fail(fault)
                if not path.is_file():
                    self.send_error(404)
                    return
                body = path.read_bytes() if fault != "garbage" else b"<html>not parquet</html>" * 50
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if fault != "cut":
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if fault in ("truncate", "cut"):
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        return Handler
