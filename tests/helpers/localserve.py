"""A tiny HTTP server on 127.0.0.1 for the data-fetch tests (never any other address).

``serve(files)`` serves ``files[name]`` at ``/<name>``, plus ``/redirect/<name>`` (a 302 to ``/<name>``) and
``/truncated/<name>`` (announces the full length, sends half, closes).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serve(files: Mapping[str, bytes]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.lstrip("/")
            if path.startswith("redirect/"):
                self.send_response(302)
                self.send_header("Location", "/" + path.removeprefix("redirect/"))
                self.end_headers()
                return
            truncated = path.startswith("truncated/")
            body = files.get(path.removeprefix("truncated/"))
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2] if truncated else body)
            if truncated:
                self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 whose port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
