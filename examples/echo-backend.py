#!/usr/bin/env python3
"""A stand-in backend for the docs' examples (standard library only): answers every request,
any method and path, with 200 and a line naming it, over HTTP/1.1 keep-alive.

    python3 examples/echo-backend.py [PORT]     # default 3000; 0 picks a free port

(`python3 -m http.server` answers 404 to paths it has no file for and 501 to POST.)
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = f"ok: {self.command} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = answer

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    server = ThreadingHTTPServer(("127.0.0.1", port), Echo)
    print(f"echo backend on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
