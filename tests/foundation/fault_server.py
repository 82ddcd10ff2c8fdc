"""A real HTTP server on 127.0.0.1 (a thread) that serves files from a directory and injects faults.

`server.faults[name]` is a list of faults applied to successive GETs of that file, then the file is
served normally: "500" (internal error), "404", "drop" (connection closed before any response),
"truncate" (full Content-Length announced, half the body sent, connection closed), "cut" (no
Content-Length, half the body, then close: only the parquet footer check can notice), "garbage"
(a 200 whose body is not parquet). `server.requests` lists every request ("METHOD /path") of any method,
so a test can show that a command made none.
"""

from __future__ import annotations

import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FaultServer:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.faults: dict[str, list[str]] = {}
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
            queue = self.faults.get(name)
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

            def do_GET(self):
                name = self.path.lstrip("/")
                fault = server._next_fault(name)
                path = server.root / name
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault in ("500", "404"):
                    self.send_error(int(fault))
                    return
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
