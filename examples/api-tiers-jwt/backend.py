#!/usr/bin/env python3
"""A stand-in API for this example (standard library only): every answer says what the call
cost in `X-Api-Units`, which the gateway's `units` policy charges: /v1/reports 250 units,
anything else 1.

    python3 backend.py [PORT]     # default 3000; 0 picks a free port
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Api(BaseHTTPRequestHandler):
    def do_GET(self):
        units = 250 if self.path.startswith("/v1/reports") else 1
        body = json.dumps({"path": self.path, "units": units}).encode() + b"\n"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Api-Units", str(units))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    server = ThreadingHTTPServer(("127.0.0.1", port), Api)
    print(f"api backend on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
