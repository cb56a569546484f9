"""A real upstream process for the backend tests (tests/proxy/backends.rs): an HTTP/1.1
server on a free loopback port that answers every request as its current mode says and
counts what it answered. It prints `PORT n` once listening.

Modes (set at start with --mode, or at run time with `PUT /__mode` and the mode as body):
  healthy            200, body = the backend's name
  slow:SECONDS       200 after SECONDS
  failing            503
  failing-after:N    503 with `Retry-After: N`
`GET /__count` answers how many requests (other than /__ ones) it has answered.
"""
import argparse
import sys
import threading
import time
from urllib.parse import urlsplit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

state = {"mode": "healthy", "count": 0, "name": "backend"}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Head and body leave in two writes: without this, Nagle's algorithm holds the body
    # for the client's delayed ACK (~40 ms a request on a kept-alive connection).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        # An absolute-form target (a client talking to it directly) has its path too.
        path = urlsplit(self.path).path
        if path == "/__count":
            with lock:
                return self.reply(200, str(state["count"]).encode())
        if path == "/__mode":
            with lock:
                state["mode"] = body.decode()
            return self.reply(204)
        with lock:
            state["count"] += 1
            mode = state["mode"]
        if mode.startswith("slow:"):
            time.sleep(float(mode.split(":", 1)[1]))
        if mode == "failing":
            return self.reply(503, b"failing")
        if mode.startswith("failing-after:"):
            after = mode.split(":", 1)[1]
            return self.reply(503, b"failing", [("Retry-After", after)])
        self.reply(200, state["name"].encode())

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = handle_any


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="healthy")
    p.add_argument("--name", default="backend")
    a = p.parse_args()
    state["mode"], state["name"] = a.mode, a.name
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
