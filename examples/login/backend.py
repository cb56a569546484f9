#!/usr/bin/env python3
"""A stand-in login backend for this example (standard library only).

POST /login with a form `username=...&password=...` and the same user name in the
`X-Login-User` header: 200 for alice / correct-horse, 401 for a wrong password, 400 when the
header is missing or names someone else (the gateway keys its per-account limit on the
header, so the application must refuse a header that is not the form's user).

    python3 backend.py [PORT]     # default 3000; 0 picks a free port
"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

USERS = {"alice": "correct-horse"}


class Login(BaseHTTPRequestHandler):
    def answer(self, status, text):
        body = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer(200, "POST /login with username and password")

    def do_POST(self):
        if self.path != "/login":
            return self.answer(404, "not found")
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        user = form.get("username", [""])[0]
        password = form.get("password", [""])[0]
        if not user or self.headers.get("X-Login-User") != user:
            return self.answer(400, "X-Login-User must name the form's username")
        if USERS.get(user) != password:
            return self.answer(401, "wrong user name or password")
        self.answer(200, f"welcome, {user}")

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    server = ThreadingHTTPServer(("127.0.0.1", port), Login)
    print(f"login backend on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
