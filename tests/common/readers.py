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
and, when the object has "bodies": [{"content_type": hex, "body": hex}, ...] and "field",
for each body the values of the text field `field` (hex, in order; [] when none, or the
string "error" when the reader refuses the body) as three real readers read it:
  bodies:  {"werkzeug": ..., "multipart": ..., "email": ...}
           -- Werkzeug 3's form parser (Flask's `request.form`; for a type Werkzeug calls
              JSON, `request.get_json()[field]`), the `multipart` package
              (Bottle's author's parser, non-strict as `parse_form_data` defaults) and the
              standard library's `email` parser (MIME as a mail reader splits it)
"""

import email
import email.policy
import io
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


def environ(content_type: bytes, body: bytes):
    # PEP 3333: the header as latin-1 text.
    return {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": content_type.decode("latin-1"),
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }


def werkzeug_form(content_type: bytes, body: bytes, field: str):
    from werkzeug.formparser import parse_form_data
    from werkzeug.wrappers import Request

    request = Request(environ(content_type, body))
    if request.is_json:  # Flask's `request.get_json()`: a JSON body's top-level `field`
        value = request.get_json(silent=True)
        if not isinstance(value, dict) or not isinstance(value.get(field), str):
            return []
        return [value[field].encode("utf-8").hex()]
    try:
        _, form, _ = parse_form_data(environ(content_type, body), silent=False)
    except Exception:
        return "error"
    return [v.encode("utf-8").hex() for v in form.getlist(field)]


def multipart_form(content_type: bytes, body: bytes, field: str):
    import multipart

    try:
        form, _ = multipart.parse_form_data(environ(content_type, body))
    except Exception:
        return "error"
    return [v.encode("utf-8").hex() for v in form.getall(field)]


def email_form(content_type: bytes, body: bytes, field: str):
    try:
        msg = email.message_from_bytes(
            b"Content-Type: " + content_type + b"\r\n\r\n" + body, policy=email.policy.HTTP
        )
        if not msg.is_multipart():
            return []
        found = []
        for part in msg.iter_parts():
            if part.get_content_disposition() != "form-data" or part.get_filename():
                continue
            if part.get_param("name", header="content-disposition") == field:
                found.append(part.get_payload(decode=True).hex())
        return found
    except Exception:
        return "error"


def main():
    ask = json.load(sys.stdin)
    out = {
        "headers": [
            {"wsgi": wsgi(bytes.fromhex(h)), "asgi_utf8": asgi_utf8(bytes.fromhex(h))}
            for h in ask["headers"]
        ],
        "queries": [{"parse_qs": parse_qs(bytes.fromhex(q))} for q in ask["queries"]],
        "auth": [{"pyjwt": pyjwt(bytes.fromhex(a), ask["secret"])} for a in ask["auth"]],
        "bodies": [],
    }
    for b in ask.get("bodies", []):
        ct, body = bytes.fromhex(b["content_type"]), bytes.fromhex(b["body"])
        out["bodies"].append(
            {
                reader.__name__.split("_")[0]: reader(ct, body, ask["field"])
                for reader in (werkzeug_form, multipart_form, email_form)
            }
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
