#!/usr/bin/env python3
"""A small fencing server speaking Fencing API v1, in standard-library Python.

It is fencecheck's second implementation of the contract, in another
language, to show the contract is language-neutral: one process serves the
issuer half (locks with leases and per-lock token counters) and the resource
half (per-key high-water mark, value and token-of-value).

Durability: every change that a reply reveals (a counter that handed out a
token, an accepted write) is on disk before the reply leaves: the whole state
is written to a temporary file, fsync'd, renamed over state.json, and the
folder fsync'd. Leases are kept in memory only: after a crash a lock may be
granted early, which fencing exists to make safe.

Clock: lease expiry reads the wall clock shifted by the offset (decimal
nanoseconds) in the file named by $FENCECHECK_CLOCK_FILE, so fencecheck's
clock nemesis can skew this server without touching the machine's clock.

Bug switches (--bug, repeatable) break it on purpose, for fencecheck's tests:
  accept-equal       a write whose token equals the high-water mark is accepted
  missing-as-zero    a write without a token is stored as token 0, unchecked
  counter-in-memory  lock counters are not persisted: tokens restart after a crash
  no-fsync           the state is written and renamed into place but never
                     fsync'd (nor the folder): a crash keeps it (the page
                     cache survives), a power loss does not
  wallclock-tokens   a token is the wall clock in milliseconds: a clock step back makes it
                     smaller than one already handed out
  forget-highwater   high-water marks are not persisted: after a crash the resource accepts
                     any token again (values survive)
  forget-idle        a key's high-water mark is evicted once the key has had no accepted
                     write for 3 s, as an expiring cache entry is; the timers are kept in
                     memory, so they start again at each start
  forget-free-lock   a lock's counter is dropped once the lock has been free (released, or
                     its lease run out) for 4 s: tokens start again at 1; timers in memory

A quirk switch (--quirk, repeatable) makes it differ from the contract in a
detail that cannot let a bad token through, as real servers do:
  missing-token-400  a write without a token is refused with 400 bad-request
                     (the contract says 428 missing-token)

Usage: fence.py --port PORT --data DIR [--host 127.0.0.1] [--bug NAME]... [--quirk NAME]...
"""

import argparse
import base64
import http.server
import json
import os
import re
import sys
import threading
import time

MAX_BODY = 1 << 20
MAX_TTL_MS = 24 * 3600 * 1000
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
TOKEN_RE = re.compile(r"^(0|[1-9][0-9]{0,19})(?:\.([A-Za-z0-9_-]{1,256}))?$")
MAX_U64 = (1 << 64) - 1
BUGS = ("accept-equal", "missing-as-zero", "counter-in-memory", "no-fsync", "wallclock-tokens", "forget-highwater",
        "forget-idle", "forget-free-lock")
FORGET_IDLE_S = 3.0  # forget-idle: how long a key's mark outlives its last accepted write
FORGET_FREE_LOCK_S = 4.0  # forget-free-lock: how long a free lock's counter is kept
QUIRKS = ("missing-token-400",)


class BadRequest(Exception):
    """A definite 4xx answer: (status, error word, message)."""

    def __init__(self, status, word, message):
        super().__init__(message)
        self.status, self.word, self.message = status, word, message


def parse_token(s):
    """The token's number, or None when it does not follow the grammar."""
    m = TOKEN_RE.match(s)
    if not m:
        return None
    n = int(m.group(1))
    return n if n <= MAX_U64 else None


def valid_name(s):
    return bool(NAME_RE.match(s)) and s not in (".", "..")


class Clock:
    """Wall clock plus the harness's offset, re-read at most every 5 ms."""

    def __init__(self, path):
        self.path, self.offset, self.read_at = path, 0, 0.0

    def now_ns(self):
        if self.path:
            mono = time.monotonic()
            if mono - self.read_at > 0.005:
                self.read_at = mono
                try:
                    with open(self.path) as f:
                        self.offset = int(f.read().strip() or "0")
                except (OSError, ValueError):
                    pass  # keep the last offset: the file is replaced by rename
        return time.time_ns() + self.offset


class State:
    """Fencing state; every method runs under one lock, durable on return."""

    def __init__(self, data_dir, bugs, clock):
        self.dir, self.bugs, self.clock = data_dir, set(bugs), clock
        self.path = os.path.join(data_dir, "state.json")
        self.mu = threading.Lock()
        self.counters, self.resources, self.holders = {}, {}, {}
        # The idle bugs' timers (monotonic seconds), in memory: a key's last
        # accepted write, a released lock's release; both from this start.
        self.started, self.written, self.freed = time.monotonic(), {}, {}
        if os.path.exists(self.path):
            with open(self.path) as f:
                saved = json.load(f)
            self.counters = saved.get("counters", {})
            self.resources = saved.get("resources", {})
        if "counter-in-memory" in self.bugs:
            self.counters = {}
        if "forget-highwater" in self.bugs:
            for r in self.resources.values():
                r["hw"] = 0

    def _persist(self):
        saved = {"resources": self.resources}
        if "counter-in-memory" not in self.bugs:
            saved["counters"] = self.counters
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(saved, f, separators=(",", ":"))
            f.flush()
            if "no-fsync" in self.bugs:
                f.close()
                os.rename(tmp, self.path)
                return
            os.fsync(f.fileno())
        os.rename(tmp, self.path)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def acquire(self, lock, owner, ttl_ms):
        with self.mu:
            now = self.clock.now_ns()
            h = self.holders.get(lock)
            if h and h["owner"] != owner and h["expires"] > now:
                raise BadRequest(409, "held", "lock %s is held by another owner" % lock)
            self._forget_free_counter(lock, h, now)
            token = self.counters.get(lock, 0) + 1
            if "wallclock-tokens" in self.bugs:
                token = self.clock.now_ns() // 1_000_000
            self.counters[lock] = token
            if "counter-in-memory" not in self.bugs:
                self._persist()
            self.holders[lock] = {"owner": owner, "token": token, "expires": now + ttl_ms * 1_000_000}
            return token

    def _forget_free_counter(self, lock, h, now):
        """forget-free-lock: drop the counter of a lock free long enough."""
        if "forget-free-lock" not in self.bugs or (h and h["expires"] > now):
            return
        mono = time.monotonic()
        if h:  # its lease ran out: free since then
            since = mono - (now - h["expires"]) / 1e9
        else:
            since = self.freed.get(lock, self.started)
        if mono - since >= FORGET_FREE_LOCK_S:
            self.counters.pop(lock, None)

    def _holder(self, lock, owner, token):
        h = self.holders.get(lock)
        if not h or h["owner"] != owner or h["token"] != token or h["expires"] <= self.clock.now_ns():
            raise BadRequest(409, "lost", "lease on %s is no longer held by this owner with this token" % lock)
        return h

    def renew(self, lock, owner, token, ttl_ms):
        with self.mu:
            h = self._holder(lock, owner, token)
            h["expires"] = self.clock.now_ns() + ttl_ms * 1_000_000

    def release(self, lock, owner, token):
        with self.mu:
            self._holder(lock, owner, token)
            del self.holders[lock]
            self.freed[lock] = time.monotonic()

    def write(self, key, token, value):
        with self.mu:
            r = self.resources.get(key, {"hw": 0})
            if "forget-idle" in self.bugs and time.monotonic() - self.written.get(key, self.started) >= FORGET_IDLE_S:
                r["hw"] = 0  # evicted: the value stays, the mark is gone
            if token is None:  # only with the missing-as-zero bug
                r["token"], r["value"] = 0, base64.b64encode(value).decode()
            else:
                hw = r["hw"]
                newer = token > hw or (token == hw and "accept-equal" in self.bugs)
                if key in self.resources and not newer:
                    raise StaleError(hw)
                r.update(hw=token, token=token, value=base64.b64encode(value).decode())
            self.resources[key] = r
            self.written[key] = time.monotonic()
            self._persist()

    def read(self, key):
        with self.mu:
            r = self.resources.get(key)
            if r is None or "value" not in r:
                return None, None
            return base64.b64decode(r["value"]), r["token"]


class StaleError(Exception):
    def __init__(self, high_water):
        super().__init__("stale")
        self.high_water = high_water


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client
    server_version = "python-fence/1"
    # Headers and body leave in two writes; with Nagle's algorithm the body
    # would wait for the client's delayed ACK (40 ms) on every answer.
    disable_nagle_algorithm = True
    state = None  # set in main
    quirks = frozenset()  # set in main (--quirk)

    def log_message(self, fmt, *args):
        pass  # one line per request would drown the node's log

    def send_json(self, status, obj, headers=()):
        body = (json.dumps(obj) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_error_json(self, status, word, message, **extra):
        body = {"error": word, "message": message}
        body.update(extra)
        self.send_json(status, body)

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    self.close_connection = True
                    raise BadRequest(413, "too-large", "body exceeds 1 MiB")
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            raise BadRequest(400, "bad-request", "bad Content-Length")
        if length > MAX_BODY:
            # Drain what was sent (up to a bound) so the client reads the
            # 413 rather than a reset; the connection is closed after it.
            self.close_connection = True
            left = min(length, 64 * MAX_BODY)
            while left > 0:
                got = self.rfile.read(min(left, 1 << 16))
                if not got:
                    break
                left -= len(got)
            raise BadRequest(413, "too-large", "body exceeds 1 MiB")
        return self.rfile.read(length) if length > 0 else b""

    def route(self):
        path = self.path.split("?", 1)[0]
        parts = path.split("/")
        if path == "/v1/health":
            return "health", None, None
        if len(parts) == 5 and parts[1:3] == ["v1", "locks"]:
            return "lock", parts[3], parts[4]
        if len(parts) == 4 and parts[1:3] == ["v1", "resources"]:
            return "resource", parts[3], None
        if path.startswith("/v1/locks/"):
            return "bad-lock", None, None
        if path.startswith("/v1/resources/"):
            return "bad-resource", None, None
        return "none", None, None

    def handle_any(self, method):
        try:
            # The body is read before anything is decided: an answer sent
            # with the body still unread would leave it in the stream to be
            # parsed as the next request on this keep-alive connection.
            self.body = self.read_body()
            kind, name, op = self.route()
            if kind == "health":
                if method not in ("GET", "HEAD"):
                    return self.not_allowed("GET")
                return self.send_json(200, {"status": "ok", "api": "v1"})
            if kind == "lock":
                return self.lock_op(method, name, op)
            if kind == "resource":
                return self.resource(method, name)
            if kind in ("bad-lock", "bad-resource"):
                what = "lock" if kind == "bad-lock" else "resource"
                raise BadRequest(400, "bad-name", "%s name must match [A-Za-z0-9._-]{1,128}" % what)
            raise BadRequest(404, "no-route", "no such endpoint in Fencing API v1: " + self.path)
        except BadRequest as e:
            self.send_error_json(e.status, e.word, e.message)
        except StaleError as e:
            self.send_error_json(409, "stale", "token is not newer than the high-water mark %d" % e.high_water,
                                 high_water=str(e.high_water))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # the outcome is unknown: a 5xx, never a 4xx
            self.close_connection = True
            self.send_error_json(500, "internal", "%s: %s" % (type(e).__name__, e))

    def not_allowed(self, allow):
        self.close_connection = True
        self.send_error_json(405, "method-not-allowed", "use " + allow)

    def lock_op(self, method, lock, op):
        if op not in ("acquire", "renew", "release"):
            raise BadRequest(404, "no-route", "lock operations are acquire, renew and release")
        if method != "POST":
            return self.not_allowed("POST")
        if not valid_name(lock):
            raise BadRequest(400, "bad-name", "lock name must match [A-Za-z0-9._-]{1,128}")
        raw = self.body
        try:
            req = json.loads(raw or b"null")
        except ValueError as e:
            raise BadRequest(400, "bad-request", "body must be a JSON object: %s" % e)
        if not isinstance(req, dict):
            raise BadRequest(400, "bad-request", "body must be a JSON object")
        owner = req.get("owner")
        if not isinstance(owner, str) or not owner or len(owner) > 256:
            raise BadRequest(400, "bad-request", "owner must be a non-empty string of at most 256 bytes")
        ttl = req.get("ttl_ms")
        if op != "release":
            if isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= MAX_TTL_MS:
                raise BadRequest(400, "bad-request", "ttl_ms must be an integer in 1..86400000")
        token = None
        if op != "acquire":
            tok = req.get("token")
            if tok is None or tok == "":
                raise BadRequest(428, "missing-token", op + " needs the token the lock was acquired with")
            token = parse_token(tok) if isinstance(tok, str) else None
            if token is None:
                raise BadRequest(400, "malformed-token", "token must be a decimal uint64")
        st = Handler.state
        if op == "acquire":
            n = st.acquire(lock, owner, ttl)
            return self.send_json(200, {"token": str(n), "ttl_ms": ttl})
        if op == "renew":
            st.renew(lock, owner, token, ttl)
            return self.send_json(200, {"token": str(token), "ttl_ms": ttl})
        st.release(lock, owner, token)
        return self.send_json(200, {"token": str(token)})

    def resource(self, method, key):
        if method not in ("GET", "HEAD", "PUT"):
            return self.not_allowed("GET, PUT")
        if not valid_name(key):
            raise BadRequest(400, "bad-name", "resource name must match [A-Za-z0-9._-]{1,128}")
        st = Handler.state
        if method == "PUT":
            value = self.body
            tok = self.headers.get("Fencing-Token", "")
            if tok == "":
                if "missing-as-zero" not in st.bugs:
                    if "missing-token-400" in Handler.quirks:
                        raise BadRequest(400, "bad-request", "no token")
                    raise BadRequest(428, "missing-token", "a write needs a Fencing-Token header")
                token = None
            else:
                token = parse_token(tok)
                if token is None:
                    raise BadRequest(400, "malformed-token", "token must be a decimal uint64")
            st.write(key, token, value)
            self.send_response(204)
            self.end_headers()
            return
        value, token = st.read(key)
        if value is None:
            raise BadRequest(404, "not-found", "resource %s was never written" % key)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Fencing-Token", str(token))
        self.send_header("Content-Length", str(len(value)))
        self.end_headers()
        if method != "HEAD":
            self.wfile.write(value)

    def do_GET(self):
        self.handle_any("GET")

    def do_HEAD(self):
        self.handle_any("HEAD")

    def do_PUT(self):
        self.handle_any("PUT")

    def do_POST(self):
        self.handle_any("POST")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def do_PATCH(self):
        self.handle_any("PATCH")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that timed out and hung up is part of a fault run, not
        # an error of this server.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description="Fencing API v1 server (Python standard library)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data", required=True, help="folder for the durable state")
    ap.add_argument("--bug", action="append", default=[], choices=BUGS,
                    help="break the server on purpose (repeatable)")
    ap.add_argument("--quirk", action="append", default=[], choices=QUIRKS,
                    help="differ from the contract in a detail that cannot let a bad token through (repeatable)")
    args = ap.parse_args()
    Handler.quirks = frozenset(args.quirk)
    os.makedirs(args.data, exist_ok=True)
    clock = Clock(os.environ.get("FENCECHECK_CLOCK_FILE", ""))
    Handler.state = State(args.data, args.bug, clock)
    srv = Server((args.host, args.port), Handler)
    print("python-fence listening on %s:%d, data %s, bugs %s" % (args.host, args.port, args.data, args.bug or "none"),
          flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
