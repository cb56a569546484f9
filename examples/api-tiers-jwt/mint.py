#!/usr/bin/env python3
"""Print an HS256 token for this example, signed with $TOLLGATE_JWT_SECRET (standard library
only; in production your identity provider issues the tokens).

    python3 mint.py SUB [PLAN] [SECONDS]     # e.g. mint.py alice pro 3600
"""
import base64
import hashlib
import hmac
import json
import os
import sys
import time


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(sub, plan=None, seconds=3600):
    claims = {
        "sub": sub,
        "iss": "https://auth.example.com/",
        "aud": "api.example.com",
        "exp": int(time.time()) + seconds,
    }
    if plan:
        claims["plan"] = plan
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    secret = os.environ["TOLLGATE_JWT_SECRET"].encode()
    sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    plan = sys.argv[2] if len(sys.argv) > 2 else None
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 3600
    print(mint(sys.argv[1], plan, seconds))
