"""How real Python backends read identity values and bearer tokens (tests/trust/differential.rs).

Reads one JSON object on stdin:
  {"headers": [hex, ...], "queries": [hex, ...], "auth": [hex, ...], "secret": "..."}
and writes one JSON object on stdout with, for each input in order, what each reader
makes of it (hex of the bytes it would key an account on, or null when it reads none):
  headers: {"wsgi": ..., "asgi_utf8": ...}   -- Flask/Werkzeug (PEP 3333 latin-1) and a
                                               UTF-8 reader, each then `str.strip()`
  queries: {"parse_qs": ...}                 -- urllib.parse.parse_qs (as Django, Flask),
                                               then `str.strip()`
  auth:    {"pyjwt": claim or null}          -- `value.split()`, a `Bearer` scheme dropped,
                                               `strip()`, then PyJWT's `jwt.decode` with the
                                               HS256 secret: the `org` claim it verified
"""

import json
import sys
import urllib.parse

import jwt


def wsgi(raw: bytes):
    return raw.decode("latin-1").strip().encode("latin-1").hex()


def asgi_utf8(raw: bytes):
    return raw.decode("utf-8", errors="replace").strip().encode("utf-8").hex()


def parse_qs(raw: bytes):
    # The value of `k=<raw>` as the query a client sends: percent-encoded bytes.
    query = "k=" + urllib.parse.quote_from_bytes(raw, safe="")
    values = urllib.parse.parse_qs(query, keep_blank_values=True).get("k")
    return values[0].strip().encode("utf-8").hex() if values else None


def pyjwt(raw: bytes, secret: str):
    parts = raw.decode("latin-1").split()
    if len(parts) == 2 and parts[0].lower() == "bearer":
        token = parts[1]
    elif len(parts) == 1:
        token = parts[0]
    else:
        return None
    try:
        claims = jwt.decode(token.strip(), secret, algorithms=["HS256"])
    except Exception:
        return None
    return claims.get("org")


def main():
    ask = json.load(sys.stdin)
    out = {
        "headers": [
            {"wsgi": wsgi(bytes.fromhex(h)), "asgi_utf8": asgi_utf8(bytes.fromhex(h))}
            for h in ask["headers"]
        ],
        "queries": [{"parse_qs": parse_qs(bytes.fromhex(q))} for q in ask["queries"]],
        "auth": [{"pyjwt": pyjwt(bytes.fromhex(a), ask["secret"])} for a in ask["auth"]],
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
