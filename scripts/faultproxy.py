#!/usr/bin/env python3
"""A fault-injecting HTTP proxy for the remote-image tests: forwards every request to an upstream
server (nginx, an S3 server) and, as a control file says, spoils some responses on the way back.

    faultproxy.py UPSTREAM_PORT CONTROL_FILE [PORT_FILE]

Listens on 127.0.0.1 (a free port, written to PORT_FILE and printed). For each request it reads
CONTROL_FILE (JSON, absent or empty = no faults), e.g.

    {"gen": 3, "latency_ms": 20, "fail": 2, "status": 503, "drop": 0, "truncate": 0, "flip": 1,
     "only_ranges": true}

- gen: a number the writer changes with every new setting (see below);
- latency_ms: delay before answering every request;
- rate_mb: answers share one link of this many MB/s, first come, first served (a response waits
  for those before it to cross, then takes its own size over the rate);
- fail: answer the next N requests with `status` (default 503) and no body;
- drop: close the connection without an answer for the next N requests;
- truncate: send the next N bodies cut in half (the headers promise the whole length);
- flip: flip one byte in the middle of the next N bodies;
- only_ranges: count and spoil only requests with a Range header (so an open's HEAD is spared);
- methods: count and spoil only requests with one of these methods (["PATCH"]: upload chunks);
- strip_range: forward every request without its Range header (a server that ignores ranges).

Only the test writes CONTROL_FILE (atomically, by renaming a new file over it), and only the proxy
writes CONTROL_FILE.left: the proxy takes a setting when its `gen` is new, counts the faults down
in memory and writes what is left, with the `gen` it belongs to, to CONTROL_FILE.left, so a test
can set a fault, run a command and see that it was used. (When both wrote the one file, a count
written back after the test had set new faults undid them.) Every request is logged to stderr as
one line: METHOD PATH RANGE -> STATUS FAULT, and ` auth=SCHEME` when it carried an Authorization
header.
"""

import http.client
import http.server
import json
import os
import socketserver
import sys
import threading
import time

UPSTREAM = int(sys.argv[1])
CONTROL = sys.argv[2]
PORT_FILE = sys.argv[3] if len(sys.argv) > 3 else None
LOCK = threading.Lock()
# When the shared link of `rate_mb` is next free (time.monotonic()).
LINK = {"free": 0.0}
# The setting in force: its `gen` and the faults left of it.
CURRENT = {"gen": None, "faults": {}}


def take_fault(has_range, method):
    """The fault for this request, counted down (under a lock), the latency, and whether to strip
    the Range header."""
    with LOCK:
        try:
            with open(CONTROL) as f:
                c = json.load(f)
        except (OSError, ValueError):
            c = {}
        if c.get("gen") != CURRENT["gen"]:
            CURRENT["gen"] = c.get("gen")
            CURRENT["faults"] = c
        c = CURRENT["faults"]
        latency = c.get("latency_ms", 0)
        strip = bool(c.get("strip_range"))
        if c.get("only_ranges") and not has_range:
            return {"strip": strip}, latency
        if c.get("methods") and method not in c["methods"]:
            return {"strip": strip}, latency
        for kind in ("drop", "fail", "truncate", "flip"):
            if c.get(kind, 0) > 0:
                c[kind] -= 1
                tmp = CONTROL + ".left.tmp"
                with open(tmp, "w") as f:
                    json.dump(c, f)
                os.replace(tmp, CONTROL + ".left")
                return {"kind": kind, "status": c.get("status", 503), "strip": strip}, latency
        return {"strip": strip}, latency

class Proxy(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def forward(self):
        rng = self.headers.get("Range")
        fault, latency = take_fault(rng is not None, self.command)
        if latency:
            time.sleep(latency / 1000)
        kind = fault.get("kind", "-")
        if kind == "drop":
            sys.stderr.write(f"{self.command} {self.path} {rng} -> dropped\n")
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        if kind == "fail":
            status = fault["status"]
            sys.stderr.write(f"{self.command} {self.path} {rng} -> {status} fail\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length", 0) or 0)
        body = self.rfile.read(length) if length else None
        up = http.client.HTTPConnection("127.0.0.1", UPSTREAM, timeout=60)
        drop = ("connection", "range") if fault.get("strip") else ("connection",)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
        up.request(self.command, self.path, body=body, headers=headers)
        resp = up.getresponse()
        data = resp.read()
        up.close()
        scheme = self.headers.get("Authorization", "").split(" ")[0]
        auth = f" auth={scheme}" if scheme else ""
        sys.stderr.write(f"{self.command} {self.path} {rng} -> {resp.status} {kind}{auth}\n")
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if kind == "flip" and data:
            mid = len(data) // 2
            data = data[:mid] + bytes([data[mid] ^ 0x40]) + data[mid + 1:]
        if kind == "truncate" and data:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        cross_link(len(data))
        self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = forward


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def cross_link(n):
    """Waits until `n` bytes have crossed the shared link (`rate_mb`), behind the answers before."""
    with LOCK:
        rate = CURRENT["faults"].get("rate_mb", 0)
        if not rate or not n:
            return
        start = max(time.monotonic(), LINK["free"])
        LINK["free"] = start + n / (rate * 1e6)
        end = LINK["free"]
    time.sleep(max(0.0, end - time.monotonic()))


def main():
    srv = Server(("127.0.0.1", 0), Proxy)
    port = srv.server_address[1]
    if PORT_FILE:
        with open(PORT_FILE + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(PORT_FILE + ".tmp", PORT_FILE)
    print(port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
