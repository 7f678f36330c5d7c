"""OAuth 2.1 access tokens (`--jwks`): the tokens are JWTs minted here
(PyJWT, with keys the tests make), checked against a JWKS the tests write
to a file or serve over HTTP. A good token of each accepted algorithm names
its tenant (`sub`, or `--tenant-claim`); each kind of bad token is refused,
401 with the RFC 6750 error and the RFC 9728 metadata's address in
`WWW-Authenticate`, and its reason named in the log; the metadata is served
without a token."""

import base64
import contextlib
import hashlib
import hmac
import http.client
import json
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from support import http_server
from test_sessions import SESSION_TOOLS, client, whoami

ISSUER = "https://issuer.example"
AUDIENCE = "https://mcp.example.com/mcp"
SCOPE = "tools:call"


class Keys:
    """Signing keys by kid, and their public JWKS."""

    def __init__(self):
        self.private = {
            "rsa-1": (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256", RSAAlgorithm),
            "ec-1": (ec.generate_private_key(ec.SECP256R1()), "ES256", ECAlgorithm),
            "ed-1": (ed25519.Ed25519PrivateKey.generate(), "EdDSA", OKPAlgorithm),
        }

    def add(self, kid: str):
        self.private[kid] = (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256", RSAAlgorithm)

    def jwks(self, kids=None) -> dict:
        keys = []
        for kid, (key, alg, family) in self.private.items():
            if kids is None or kid in kids:
                jwk = family.to_jwk(key.public_key(), as_dict=True)
                keys.append({**jwk, "kid": kid, "use": "sig", "alg": alg})
        return {"keys": keys}

    def token(self, kid: str = "rsa-1", **claims) -> str:
        key, alg, _ = self.private[kid]
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "nbf": now - 5,
                   "exp": now + 300, "scope": f"openid {SCOPE}", **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw(url: str, token: str | None, method: str = "POST", path: str | None = None):
    """An `initialize` (or a GET of `path`) with `token`: status, headers, body."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}).encode()
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        connection.request(method, path or parts.path, body=body if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


@contextlib.asynccontextmanager
async def jwt_server(jwks: str, *options: str, log: list | None = None, env: dict | None = None):
    with tempfile.TemporaryDirectory() as root:
        args = ("--workers", "1", "serve", "--http", "127.0.0.1:0", "--sessions-root", root,
                "--jwks", jwks, "--issuer", ISSUER, "--audience", AUDIENCE, "--required-scope", SCOPE, *options)
        async with http_server(*args, functions=SESSION_TOOLS, log=log, env=env) as (_, url):
            yield url


def certificate_authority(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for 127.0.0.1: (ca.pem, cert.pem, key.pem)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def certificate(subject, issuer, public_key, signing_key, ca: bool):
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
                   .serial_number(x509.random_serial_number()).not_valid_before(now - day).not_valid_after(now + day)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signing_key, hashes.SHA256())

    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "toolpool test CA")])
    leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    ca = certificate(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    leaf = certificate(leaf_name, ca_name, leaf_key.public_key(), ca_key, False)
    paths = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return paths


class JwksOverHttp:
    """The key set served at http(s)://127.0.0.1:PORT/jwks.json, counting
    fetches; https with `tls` (cert.pem, key.pem)."""

    def __init__(self, document: dict, tls: tuple[Path, Path] | None = None):
        self.document = document
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                outer.fetches += 1
                body = json.dumps(outer.document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class AccessTokens(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        self.keys = Keys()
        self.tmp = tempfile.TemporaryDirectory()
        self.jwks = Path(self.tmp.name) / "jwks.json"
        self.jwks.write_text(json.dumps(self.keys.jwks()))

    def tearDown(self):
        self.tmp.cleanup()

    async def test_each_algorithm_names_its_tenant(self):
        async with jwt_server(str(self.jwks)) as url:
            for kid, tenant in (("rsa-1", "alice"), ("ec-1", "bob"), ("ed-1", "carol")):
                async with client(url, token=self.keys.token(kid, sub=tenant)) as c:
                    self.assertEqual(whoami(await c.call_tool("whoami", {"tag": kid}))["session_id"], f"{tenant}~default")
        # Another claim names the tenant.
        async with jwt_server(str(self.jwks), "--tenant-claim", "team") as url:
            async with client(url, token=self.keys.token(team="ops")) as c:
                self.assertEqual(whoami(await c.call_tool("whoami", {"tag": "t"}))["session_id"], "ops~default")

    async def test_every_bad_token_is_refused_and_named_in_the_log(self):
        now = int(time.time())
        good = self.keys.token()
        head, payload, signature = good.split(".")
        rsa_public_pem = self.keys.private["rsa-1"][0].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
        hs_head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}).encode())
        hs_body = b64(json.dumps(claims).encode())
        hs_sig = b64(hmac.new(rsa_public_pem, f"{hs_head}.{hs_body}".encode(), hashlib.sha256).digest())
        none_head = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": "rsa-1"}).encode())
        tampered = b64(json.dumps({**claims, "sub": "mallory"}).encode())
        cases = {
            "expired": (self.keys.token(exp=now - 120, iat=now - 600, nbf=now - 600), "the token has expired (exp)"),
            "not yet valid": (self.keys.token(nbf=now + 600), "the token is not valid yet (nbf)"),
            "wrong aud": (self.keys.token(aud="https://other.example/mcp"), "the token's aud does not name this server"),
            "wrong iss": (self.keys.token(iss="https://evil.example"), "the token's iss is not --issuer"),
            "alg none": (f"{none_head}.{payload}.", 'the token\'s alg "none" is not accepted'),
            "HS256 with the public key": (f"{hs_head}.{hs_body}.{hs_sig}", 'the token\'s alg "HS256" is not accepted'),
            "unknown kid": (self.keys.token("rsa-1").replace(head, b64(json.dumps(
                {"alg": "RS256", "typ": "JWT", "kid": "nobody"}).encode())), 'a key (kid "nobody") the key set does not hold'),
            "64 KiB": (self.keys.token(padding="x" * 65536), "bytes; at most 8192 are read"),
            "tampered payload": (f"{head}.{tampered}.{signature}", "the token's signature does not hold"),
            "a string nbf": (self.keys.token(nbf=str(now + 600)), "the token's nbf claim has the wrong type"),
            "an iat ahead": (self.keys.token(iat=now + 600), "the token was issued in the future (iat)"),
            "no tenant-shaped sub": (self.keys.token(sub="auth0|123"), "the token's sub claim"),
        }
        log: list[str] = []
        async with jwt_server(str(self.jwks), log=log) as url:
            self.assertEqual(raw(url, good)[0], 200)
            for what, (token, reason) in cases.items():
                status, headers, body = raw(url, token)
                self.assertEqual(status, 401, f"{what}: {body}")
                self.assertIn(reason, body, what)
                challenge = headers.get("WWW-Authenticate", "")
                self.assertIn('error="invalid_token"', challenge, what)
                self.assertIn('resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"',
                              challenge, what)
            # No token: 401 naming the metadata, without an error.
            status, headers, _ = raw(url, None)
            self.assertEqual(status, 401)
            self.assertNotIn("error=", headers["WWW-Authenticate"])
            self.assertIn("resource_metadata=", headers["WWW-Authenticate"])
            # A token without the scope: 403 insufficient_scope naming it.
            status, headers, body = raw(url, self.keys.token(scope="openid"))
            self.assertEqual(status, 403, body)
            self.assertIn('error="insufficient_scope"', headers["WWW-Authenticate"])
            self.assertIn(f'scope="{SCOPE}"', headers["WWW-Authenticate"])
            # The metadata, without a token, at both addresses.
            for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
                status, _, body = raw(url, None, method="GET", path=path)
                self.assertEqual(status, 200, body)
                document = json.loads(body)
                self.assertEqual(document["resource"], AUDIENCE)
                self.assertEqual(document["authorization_servers"], [ISSUER])
                self.assertEqual(document["scopes_supported"], [SCOPE])
        for what, (_, reason) in cases.items():
            lines = [line for line in log[0].splitlines() if "refused a request: unauthorized: " in line]
            self.assertTrue(any(reason in line for line in lines), what)

    async def test_a_key_set_at_a_url_is_fetched_again_for_a_new_key_and_not_for_every_token(self):
        served = JwksOverHttp(self.keys.jwks(kids={"rsa-1"}))
        try:
            async with jwt_server(served.url) as url:
                await until_fetched(served)
                self.assertEqual(raw(url, self.keys.token("rsa-1"))[0], 200)
                # The issuer adds a key; past the least time between fetches,
                # its first token fetches the set again.
                self.keys.add("rsa-2")
                served.document = self.keys.jwks()
                await anyio.sleep(3.5)
                self.assertEqual(raw(url, self.keys.token("rsa-2", sub="dave"))[0], 200)
                fetches = served.fetches
                # Made-up kids, one after another: at most one more fetch.
                for i in range(20):
                    forged = self.keys.token("rsa-1").split(".")
                    forged[0] = b64(json.dumps({"alg": "RS256", "kid": f"made-up-{i}"}).encode())
                    self.assertEqual(raw(url, ".".join(forged))[0], 401)
                self.assertLessEqual(served.fetches - fetches, 1)
        finally:
            served.close()

    async def test_a_key_set_over_https_is_fetched_against_the_trusted_roots(self):
        ca, cert, key = certificate_authority(Path(self.tmp.name))
        served = JwksOverHttp(self.keys.jwks(), tls=(cert, key))
        try:
            # Trusted through SSL_CERT_FILE: the set is fetched, tokens pass.
            async with jwt_server(served.url, env={"SSL_CERT_FILE": str(ca)}) as url:
                await until_fetched(served)
                self.assertEqual(raw(url, self.keys.token("ec-1"))[0], 200)
            # A certificate nobody vouched for: no keys, and the log says why.
            log: list[str] = []
            fetches = served.fetches
            other = Path(self.tmp.name) / "other"
            other.mkdir()
            other_ca, _, _ = certificate_authority(other)
            async with jwt_server(served.url, log=log, env={"SSL_CERT_FILE": str(other_ca)}) as url:
                await anyio.sleep(1)
                self.assertEqual(raw(url, self.keys.token("ec-1"))[0], 401)
            self.assertEqual(served.fetches, fetches)
            self.assertIn("--jwks: kept the keys in force", log[0])
            self.assertIn("certificate", log[0].lower())
        finally:
            served.close()


async def until_fetched(served: JwksOverHttp):
    deadline = time.monotonic() + 10
    while served.fetches == 0 and time.monotonic() < deadline:
        await anyio.sleep(0.05)


if __name__ == "__main__":
    unittest.main()
