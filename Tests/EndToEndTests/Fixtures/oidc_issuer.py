#!/usr/bin/env python3
"""A real OpenID Connect issuer on loopback, for the trusted-publishing tests.

Serves its discovery document and JWKS as GitHub's and GitLab's issuers do, makes its own keys
(RSA-2048 and P-256, with Python's cryptography), and signs the tokens the tests ask for:

  GET  /.well-known/openid-configuration, GET /jwks     what an origin fetches (counted)
  GET  PREFIX/.well-known/openid-configuration, PREFIX/jwks   the same for the issuer URL+PREFIX
       (a path issuer such as GitLab's on a sub-path), with the same keys
  GET  /gha/token?audience=AUD  (Authorization: bearer REQUEST-TOKEN)
       GitHub Actions' token service: {"value": JWT} with the claims POST /gha/claims set
  POST /mint    {"claims": {...}, "alg": "RS256"|"ES256"|"none"|"HS256-public", "key": "rsa-1"}
       a token signed as asked (HS256-public: an HMAC keyed with the RSA key's public PEM,
       the classic confusion attack); "kid" in the body overrides the header's kid
  POST /rotate  a new RSA key rsa-N replaces every RSA key in the JWKS; answers its kid
  POST /down, POST /up   discovery and JWKS answer 503 while down
  GET  /stats   {"discovery": n, "jwks": n, "paths": [every path an origin asked for, as sent]}

Prints "listening PORT" once ready. Stops at SIGTERM.
"""
import base64
import hashlib
import hmac
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def integer(value: int, size: int = 0) -> bytes:
    return value.to_bytes(size or (value.bit_length() + 7) // 8, "big")


class Issuer:
    def __init__(self):
        self.lock = threading.Lock()
        self.keys = {"rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
                     "ec-1": ec.generate_private_key(ec.SECP256R1())}
        self.published = ["rsa-1", "ec-1"]
        self.rotations = 1
        self.down = False
        self.stats = {"discovery": 0, "jwks": 0, "paths": []}
        self.gha_claims = {}
        self.request_token = "gha-request-token"
        self.url = ""

    def jwks(self):
        entries = []
        for kid in self.published:
            key = self.keys[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                numbers = key.public_key().public_numbers()
                entries.append({"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
                                "n": b64(integer(numbers.n)), "e": b64(integer(numbers.e))})
            else:
                numbers = key.public_key().public_numbers()
                entries.append({"kty": "EC", "kid": kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                                "x": b64(integer(numbers.x, 32)), "y": b64(integer(numbers.y, 32))})
        return {"keys": entries}

    def sign(self, claims, alg="RS256", key="rsa-1", kid=None):
        header = {"typ": "JWT", "alg": "HS256" if alg == "HS256-public" else alg}
        if alg != "none":
            header["kid"] = kid if kid is not None else key
        signing = (b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())).encode()
        if alg == "none":
            return signing.decode() + "."
        private = self.keys[key]
        if alg == "RS256":
            signature = private.sign(signing, padding.PKCS1v15(), hashes.SHA256())
        elif alg == "ES256":
            r, s = utils.decode_dss_signature(private.sign(signing, ec.ECDSA(hashes.SHA256())))
            signature = integer(r, 32) + integer(s, 32)
        elif alg == "HS256-public":
            secret = private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            signature = hmac.new(secret, signing, hashlib.sha256).digest()
        else:
            raise ValueError(alg)
        return signing.decode() + "." + b64(signature)

    def rotate(self):
        self.rotations += 1
        kid = "rsa-%d" % self.rotations
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.published = [k for k in self.published if not k.startswith("rsa-")] + [kid]
        return kid


ISSUER = Issuer()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self):
        url = urlparse(self.path)
        with ISSUER.lock:
            discovery = "/.well-known/openid-configuration"
            if url.path.endswith(discovery) or url.path.endswith("/jwks"):
                ISSUER.stats["discovery" if url.path.endswith(discovery) else "jwks"] += 1
                ISSUER.stats["paths"].append(self.path)
                if ISSUER.down:
                    return self.answer(503, {"error": "down"})
                if url.path.endswith("/jwks"):
                    return self.answer(200, ISSUER.jwks())
                prefix = url.path[:-len(discovery)]
                return self.answer(200, {"issuer": ISSUER.url + unquote(prefix), "jwks_uri": ISSUER.url + prefix + "/jwks",
                                         "id_token_signing_alg_values_supported": ["RS256", "ES256"]})
            if url.path == "/stats":
                return self.answer(200, ISSUER.stats)
            if url.path == "/gha/token":
                if self.headers.get("Authorization", "").lower() != "bearer " + ISSUER.request_token:
                    return self.answer(401, {"message": "bad request token"})
                audience = parse_qs(url.query).get("audience", [ISSUER.url])[0]
                now = int(time.time())
                claims = dict(ISSUER.gha_claims, iss=ISSUER.url, aud=audience, iat=now, nbf=now, exp=now + 300,
                              jti="gha-%d" % time.monotonic_ns())
                return self.answer(200, {"count": 1, "value": ISSUER.sign(claims)})
        self.answer(404, {"error": "no such path"})

    def do_POST(self):
        url = urlparse(self.path)
        body = self.body()
        with ISSUER.lock:
            if url.path == "/mint":
                token = ISSUER.sign(body["claims"], body.get("alg", "RS256"), body.get("key", "rsa-1"), body.get("kid"))
                return self.answer(200, token.encode(), "text/plain")
            if url.path == "/gha/claims":
                ISSUER.gha_claims = body
                return self.answer(200, {})
            if url.path == "/rotate":
                return self.answer(200, {"kid": ISSUER.rotate()})
            if url.path in ("/down", "/up"):
                ISSUER.down = url.path == "/down"
                return self.answer(200, {})
        self.answer(404, {"error": "no such path"})


def main():
    # A child may inherit a signal mask that blocks SIGTERM: unblock it, so that it stops.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 0), Handler)
    server.daemon_threads = True
    ISSUER.url = "http://127.0.0.1:%d" % server.server_address[1]
    print("listening %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
