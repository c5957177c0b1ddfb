#!/usr/bin/env python3
"""A token server for the registry tests: the other half of the distribution registry's token
authentication (`auth: token:` in its configuration), so that the registry itself checks real
tokens. Issues RS256 JSON Web Tokens signed with `openssl` (the signing certificate in the `x5c`
header, which the registry checks against its `rootcertbundle`).

    tokenserver.py PORT_FILE KEY CERT ISSUER USER:PASSWORD

Listens on 127.0.0.1 (a free port, written to PORT_FILE). `GET /token?service=S&scope=...`:
anonymous requests get `pull` on any repository, requests with the right basic credentials get
every action asked for, wrong credentials get 401. Tokens live 300 s. Every request is logged to
stderr as one line: `user scope -> granted`.
"""

import base64
import http.server
import json
import os
import socketserver
import subprocess
import sys
import time
import urllib.parse
import uuid

PORT_FILE, KEY, CERT, ISSUER, CREDS = sys.argv[1:6]


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def cert_der():
    out = subprocess.run(["openssl", "x509", "-in", CERT, "-outform", "DER"], check=True,
                         stdout=subprocess.PIPE).stdout
    return base64.b64encode(out).decode()


X5C = cert_der()


def sign(service, user, access):
    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "x5c": [X5C]}
    claims = {"iss": ISSUER, "sub": user, "aud": service, "exp": now + 300, "nbf": now - 10,
              "iat": now, "jti": str(uuid.uuid4()), "access": access}
    signing_input = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())).encode()
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing_input, check=True,
                         stdout=subprocess.PIPE).stdout
    return signing_input.decode() + "." + b64url(sig)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        user = ""
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            given = base64.b64decode(auth[6:]).decode(errors="replace")
            if given != CREDS:
                sys.stderr.write(f"{given.split(':')[0]} refused\n")
                return self.reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]})
            user = given.split(":")[0]
        access = []
        for scope in q.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            asked = [a for a in actions.split(",") if a]
            granted = asked if user else [a for a in asked if a == "pull"]
            access.append({"type": kind, "name": name, "actions": granted})
            sys.stderr.write(f"{user or '-'} {scope} -> {','.join(granted) or 'nothing'}\n")
        token = sign(q.get("service", [""])[0], user, access)
        self.reply(200, {"token": token, "access_token": token, "expires_in": 300,
                         "issued_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(PORT_FILE + ".tmp", PORT_FILE)
    srv.serve_forever()


if __name__ == "__main__":
    main()
