#!/usr/bin/env python3
"""t/chaos.py: drive random hostile traffic at a running Cistern and check
invariants (issue 16).

Run standalone against an instance that maps http://c.test/ (--host) to a
t/origin.py origin:

    python3 -B t/chaos.py --port 8080 --master-pid PID [--seconds 60]
        [--seed S] [--concurrency 8] [--mode chaos|soak] [--json FILE]

or import it: t/test_chaos.py calls run(), scripts/soak.sh runs it with
--mode soak.  CISTERN_CHAOS_SEED and CISTERN_CHAOS_SECONDS give the seed
and the duration when the options do not.  The seed is printed first; each
thread's sequence of actions (and every byte it sends) follows from it, so
a failing run is replayed with the same seed (thread interleaving is the
kernel's; --only ACTION,... narrows a replay to some actions).

What each thread does, at random: GETs of cached objects (hits) and of new
URLs (misses), HEAD, pipelined requests, POST and GET with bodies (length
and chunked) to the origin's echo, bad chunked bodies, request smuggling
attempts, PUSH and PURGE, /_stats and /_metrics, malformed request bytes;
clients that read slowly, half-close after sending, reset at random
points, go silent or trickle their request; URLs whose origin trickles,
goes silent, closes early, resets, sends malformed heads (origin.py's
bad-head/K), more than it announced (extra-resp/N) or endless empty lines
(blank-lines).

Invariants (each breach is a VIOLATION, printed with its seed, thread,
action and bytes):
  - every response is well framed: a parsable status line and header
    block, one Content-Length or chunked framing (never both);
  - every complete response to a URL whose content is known (seed/S: the
    body is seeded(S, N)) is byte-exact; a HEAD's Content-Length matches;
  - a PUSHed URL serves one of the versions pushed or the origin's;
  - no request gets two responses: on every connection the responses
    never outnumber the requests sent (smuggling);
  - with --master-pid: the worker pids never change, the master lives,
    each worker's fd count comes back near where it started, and its
    RssAnon does not keep growing through the run.
In chaos mode, a well-behaved request for a healthy URL must also get a
complete 200 within the time limit (no-response, incomplete, timeout and
bad status are violations); in soak mode (workers are killed on purpose)
those are only counted, by cause.

Exit status: 0 no violation, 1 violations, 2 usage.
"""

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from harness import _parse, children_of, listen_inodes, rss_anon  # noqa: E402
from origin import seeded, pattern, BAD_HEADS  # noqa: E402

CC = "headers?Cache-Control=max-age%3D600"
HOT_SIZES = [0, 1, 100, 1500, 8192, 65536, 300000]
BIG_SIZES = [1 << 20, 3 << 20]
HEALTHY_TIMEOUT = 25.0      # a healthy request must be answered by then
FAULT_TIMEOUT = 25.0        # the daemon's origin timeouts must act by then
AVAILABILITY = ("no-response", "incomplete", "timeout", "status", "connect")


def expected_body(path):
    """The body t/origin.py sends for path when it is known: seed/S with
    bytes/N, chunked/N, slow-body/N, close-mid-body/N or stall/N (the full
    announced body), or stream/N (pattern).  None when unknown."""
    segs = [s for s in path.split("?", 1)[0].split("/") if s]
    seed = body = None
    for i, s in enumerate(segs):
        arg = segs[i + 1] if i + 1 < len(segs) else None
        if s == "seed" and arg:
            seed = arg
        elif s in ("bytes", "chunked", "slow-body", "close-mid-body",
                   "stall", "stream") and arg and arg.isdigit():
            body = (s, int(arg))
        elif s in ("bad-head", "blank-lines", "echo", "hang", "close",
                   "reset"):
            return None
    if body is None:
        return None
    if body[0] == "stream":
        return pattern(body[1])
    return seeded(seed, body[1]) if seed else pattern(body[1])


class Req:
    """One request: its bytes and what a correct answer looks like."""

    def __init__(self, method, path, host, body=None, chunked=None,
                 headers=(), kind="healthy", raw=None, version="1.1"):
        self.method, self.path, self.kind = method, path, kind
        self.expect = expected_body(path) if kind in ("healthy", "fault") \
            and method in ("GET", "HEAD") else None
        self.allowed = None         # callable(body) -> bool (PUSH URLs)
        self.echo = None            # the body the origin must have seen
        if raw is not None:
            self.bytes = raw
            return
        h = ["%s %s HTTP/%s" % (method, path, version), "Host: %s" % host]
        h += ["%s: %s" % kv for kv in headers]
        if chunked is not None:
            h.append("Transfer-Encoding: chunked")
            tail = chunked
        elif body is not None:
            h.append("Content-Length: %d" % len(body))
            tail = body
        else:
            tail = b""
        self.bytes = ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + tail

    def __repr__(self):
        return "%s %s" % (self.method, self.path)


def chunk_encode(rng, data, trailers=False):
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, max(1, min(len(data) - i, 9000)))
        ext = b";x=y" if rng.random() < 0.2 else b""
        out.append(b"%x%s\r\n%s\r\n" % (n, ext, data[i:i + n]))
        i += n
    out.append(b"0\r\n")
    if trailers:
        out.append(b"X-Trailer: t\r\n")
    out.append(b"\r\n")
    return b"".join(out)


# ---------------------------------------------------------------------------
# Connections

class Conn:
    def __init__(self, d, rcvbuf=None, timeout=10.0):
        self.d = d
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect((d.addr, d.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.eof = False
        self.pending = []           # requests sent, not answered yet
        self.sent = 0
        self.answered = 0           # complete final responses
        self.closing = False        # a response said Connection: close
        self.history = []           # every byte string sent (for reports)

    def send(self, req):
        self.pending.append(req)
        self.sent += 1
        self.send_bytes(req.bytes)

    def send_bytes(self, data):
        self.history.append(data)
        if self.d.trace:
            self.d.trace_send(self, data)
        self.sock.sendall(data)

    def sent_bytes(self):
        """What went out on this connection, as one Req for a report."""
        return Req("-", "-", "-", raw=b"".join(self.history))

    def recv(self, timeout, n=262144):
        """One recv: True if bytes came, False on timeout; EOF/reset set
        .eof (and return True)."""
        if self.eof:
            return True
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data = self.sock.recv(n)
        except socket.timeout:
            return False
        except OSError:
            self.eof = True
            return True
        if not data:
            self.eof = True
        self.buf += data
        return True

    def close(self, reset=False):
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------
# The driver

class Driver:
    def __init__(self, port, host="c.test", addr="127.0.0.1", seconds=60.0,
                 seed=None, concurrency=8, master_pid=None, mode="chaos",
                 only=None, fd_slack=24, log=None, trace=None):
        self.port, self.host, self.addr = port, host, addr
        self.seconds, self.concurrency = seconds, concurrency
        self.seed = seed if seed is not None else random.randrange(1 << 31)
        self.master_pid, self.mode = master_pid, mode
        self.only = set(only) if only else None
        self.fd_slack = fd_slack
        self.trace = open(trace, "a") if trace else None
        self.log = log or (lambda s: print(s, flush=True))
        self.lock = threading.Lock()
        self.violations = []
        self.counts = {}
        self.failures = {}
        self.statuses = {}
        self.bytes_checked = 0
        self.bodies_checked = 0
        # PUSH namespace: new each run, so pushed versions left in a
        # long-running instance by an earlier run are never seen here.
        self.run_id = os.urandom(4).hex()
        self.pushed = {}            # path -> set of allowed bodies
        self.samples = []           # (t, {pid: (fds, rss)})
        self.stop = threading.Event()
        self.hot = []
        r = random.Random("%s:hot" % self.seed)
        for i in range(40):
            n = r.choice(HOT_SIZES)
            kind = "chunked" if i % 3 == 0 else "bytes"
            self.hot.append("/seed/h%d-%d/%s/%d/%s" % (self.seed % 1000, i,
                                                       kind, n, CC))
        self.big = ["/seed/big%d/bytes/%d/%s" % (i, n, CC)
                    for i, n in enumerate(BIG_SIZES)]
        self.push_paths = ["/push/%s/%d" % (self.run_id, i) for i in range(8)]
        for p in self.push_paths:
            self.pushed[p] = {("GET %s\n" % p).encode()}

    # -- bookkeeping -------------------------------------------------------
    def count(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def violation(self, cause, ctx, detail, req=None, data=None):
        with self.lock:
            self.violations.append(cause)
            k = len(self.violations)
        msg = ["VIOLATION %d [%s] seed=%s thread=%d action=%d:%s: %s"
               % (k, cause, self.seed, ctx.tid, ctx.n, ctx.action, detail)]
        if req is not None:
            msg.append("    sent: %r" % _cut(req.bytes))
        if data is not None:
            msg.append("    received: %r" % _cut(data))
        if k <= 60:
            self.log("\n".join(msg))

    def availability(self, cause, ctx, detail, req=None, data=None):
        with self.lock:
            self.failures[cause] = self.failures.get(cause, 0) + 1
        if self.mode == "chaos":
            self.violation(cause, ctx, detail, req, data)

    def trace_send(self, conn, data):
        """--trace: one line per send: time, thread, action number and
        name, local port, the bytes."""
        ctx = threading.current_thread().__dict__.get("chaos_ctx")
        with self.lock:
            self.trace.write("%.3f t%s #%s %s :%d %r\n" % (
                time.time(), ctx.tid if ctx else "?", ctx.n if ctx else "?",
                ctx.action if ctx else "?", conn.sock.getsockname()[1],
                _cut(data, 2000)))
            self.trace.flush()

    # -- processes -----------------------------------------------------------
    def workers(self):
        """The master's children that hold our listening socket: the
        workers (the cache manager holds none)."""
        if not self.master_pid:
            return []
        return listeners(children_of(self.master_pid), self.port)

    @staticmethod
    def fds(pid):
        try:
            return len(os.listdir("/proc/%d/fd" % pid))
        except OSError:
            return -1

    def sample(self):
        s = {p: (self.fds(p), rss_anon(p)) for p in self.workers()}
        with self.lock:
            self.samples.append((time.monotonic(), s))
        return s

    def _monitor(self):
        while not self.stop.wait(2.0):
            self.sample()

    # -- the run -------------------------------------------------------------
    def run(self):
        self.log("chaos: seed=%d (CISTERN_CHAOS_SEED=%d to repeat) seconds=%g "
                 "concurrency=%d mode=%s port=%d"
                 % (self.seed, self.seed, self.seconds, self.concurrency,
                    self.mode, self.port))
        ctx0 = Ctx(self, -1)
        self.start_workers = self.workers()
        # Warm the hot set so that later GETs are hits; the fd baseline is
        # taken after, with the origin pool in use.
        for p in self.hot + self.big:
            ctx0.single(Req("GET", p, self.host), HEALTHY_TIMEOUT)
        self.start_sample = self.sample()
        t0 = time.monotonic()
        self.deadline = t0 + self.seconds
        mon = threading.Thread(target=self._monitor, daemon=True)
        mon.start()
        threads = [threading.Thread(target=Ctx(self, i).main, daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.seconds + 120)
            if t.is_alive():
                self.violation("driver-stuck", ctx0, "a thread did not end "
                               "within 120 s of the deadline")
        self.stop.set()
        self.elapsed = time.monotonic() - t0
        self.final_checks(ctx0)
        return self.report()

    def final_checks(self, ctx):
        # The daemon must still serve: a hit and the stats.
        ctx.action = "final-health"
        for p in (self.hot[1], "/_stats"):
            req = Req("GET", p, self.host,
                      kind="admin" if p == "/_stats" else "healthy")
            r = ctx.single(req, HEALTHY_TIMEOUT)
            if r is None or r.status != 200:
                self.violation("final-health", ctx, "%s after the run: %r"
                               % (p, r and r.status), req)
        if not self.master_pid:
            return
        if not os.path.exists("/proc/%d" % self.master_pid):
            self.violation("master-died", ctx, "master pid %d is gone"
                           % self.master_pid)
            return
        now = self.workers()
        if self.mode == "chaos" and sorted(now) != sorted(self.start_workers):
            self.violation("worker-died", ctx, "worker pids %s at the start, "
                           "%s at the end" % (self.start_workers, now))
        # fds: every connection of ours is closed; idle ones (keep-alive,
        # origin pool, hung origins) go with the daemon's timeouts.
        base = self.start_sample

        def fd_ok():
            s = self.sample()
            return all(p not in base or s[p][0] <= base[p][0] + self.fd_slack
                       for p in s)
        deadline = time.monotonic() + 30
        while not fd_ok() and time.monotonic() < deadline:
            time.sleep(1)
        end = self.sample()
        self.end_sample = end
        for p, (fds, rss) in end.items():
            if p in base and fds > base[p][0] + self.fd_slack:
                self.violation("fd-leak", ctx, "worker %d: %d fds at the start"
                               ", %d 30 s after the end" % (p, base[p][0], fds))
        # RSS: compare the first third of the run with its end, per worker.
        with self.lock:
            samples = list(self.samples)
        if len(samples) >= 6:
            third = samples[len(samples) // 3][1]
            for p, (fds, rss) in end.items():
                if p in third and self.mode == "chaos":
                    grew = rss - third[p][1]
                    if grew > max(64 << 20, third[p][1]):
                        self.violation("rss-growth", ctx, "worker %d RssAnon "
                                       "%d KiB a third into the run, %d KiB "
                                       "at the end" % (p, third[p][1] >> 10,
                                                       rss >> 10))

    def report(self):
        lines = ["chaos: seed=%d ran %.0f s, %d actions, %d responses, %d "
                 "bodies checked byte for byte (%d bytes)"
                 % (self.seed, self.elapsed, sum(v for k, v in
                                                 self.counts.items()
                                                 if k.startswith("action:")),
                    sum(self.statuses.values()), self.bodies_checked,
                    self.bytes_checked)]
        acts = sorted((k[7:], v) for k, v in self.counts.items()
                      if k.startswith("action:"))
        lines.append("  actions: " + ", ".join("%s %d" % kv for kv in acts))
        lines.append("  statuses: " + ", ".join(
            "%s %d" % kv for kv in sorted(self.statuses.items())))
        other = sorted((k, v) for k, v in self.counts.items()
                       if not k.startswith("action:"))
        if other:
            lines.append("  outcomes: " + ", ".join("%s %d" % kv
                                                   for kv in other))
        lines.append("  failures by cause: " + (", ".join(
            "%s %d" % kv for kv in sorted(self.failures.items())) or "none"))
        if self.master_pid and getattr(self, "end_sample", None):
            for p in sorted(set(self.start_sample) | set(self.end_sample)):
                a = self.start_sample.get(p, (-1, 0))
                b = self.end_sample.get(p, (-1, 0))
                lines.append("  worker %d: fds %d -> %d, RssAnon %d -> %d KiB"
                             % (p, a[0], b[0], a[1] >> 10, b[1] >> 10))
        vs = {}
        for v in self.violations:
            vs[v] = vs.get(v, 0) + 1
        lines.append("chaos: %d violation(s)%s" % (
            len(self.violations), (": " + ", ".join(
                "%s %d" % kv for kv in sorted(vs.items()))) if vs else ""))
        text = "\n".join(lines)
        self.log(text)
        return {"seed": self.seed, "violations": list(self.violations),
                "counts": dict(self.counts), "failures": dict(self.failures),
                "statuses": {str(k): v for k, v in self.statuses.items()},
                "bodies_checked": self.bodies_checked,
                "start": {str(k): v for k, v in self.start_sample.items()},
                "end": {str(k): v for k, v in
                        getattr(self, "end_sample", {}).items()},
                "text": text}


def listeners(pids, port):
    """Those of pids with a TCP socket listening on port (from
    /proc/net/tcp{,6} and each process's fd links)."""
    inodes = listen_inodes(port)
    out = []
    for p in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % p)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (p, fd)) in inodes:
                    out.append(p)
                    break
            except OSError:
                pass
    return sorted(out)


def _cut(b, n=600):
    return b if len(b) <= n else b[:n] + b"...(%d bytes)" % len(b)


# ---------------------------------------------------------------------------
# One thread

class Ctx:
    def __init__(self, d, tid):
        self.d, self.tid = d, tid
        self.rng = random.Random("%s:%d" % (d.seed, tid))
        self.n = 0
        self.action = "warm"
        self.ka = None              # this thread's keep-alive connection

    def uniq(self):
        return "%d-%d-%d" % (self.d.seed % 100000, self.tid, self.n)

    def main(self):
        threading.current_thread().chaos_ctx = self
        acts = [(w, name) for name, w in ACTIONS
                if self.d.only is None or name in self.d.only]
        total = sum(w for w, _ in acts)
        while time.monotonic() < self.d.deadline:
            self.n += 1
            x = self.rng.random() * total
            for w, name in acts:
                x -= w
                if x < 0:
                    break
            self.action = name
            self.d.count("action:" + name)
            try:
                getattr(self, "act_" + name.replace("-", "_"))()
            except ConnectionRefusedError as e:
                self.d.availability("connect", self, "connect: %s" % e)
                time.sleep(0.2)
            except OSError as e:
                # A send or connect that failed: the daemon closed on us
                # (allowed: it may refuse what we send), counted only.
                self.d.count("oserror")
                if isinstance(e, socket.timeout):
                    self.d.availability("connect", self, "socket timeout: %s"
                                        % e)
                self.drop_ka()
        self.drop_ka()

    def drop_ka(self):
        if self.ka is not None:
            self.ka.close()
            self.ka = None

    # -- checking responses ----------------------------------------------------
    def check(self, req, r, complete_framing=True):
        """Check one complete response r to req; returns r."""
        d = self.d
        with d.lock:
            d.statuses[r.status] = d.statuses.get(r.status, 0) + 1
        cls = r.header_all("Content-Length")
        te = r.header("Transfer-Encoding")
        if len(set(cls)) > 1:
            d.violation("framing", self, "%r: several Content-Length %r"
                        % (req, cls), req, r.raw[:400])
        if cls and te is not None:
            d.violation("framing", self, "%r: both Content-Length and "
                        "Transfer-Encoding" % req, req, r.raw[:400])
        if req.kind == "healthy" and r.status != 200:
            d.availability("status", self, "%r: status %d for a healthy URL"
                           % (req, r.status), req, r.raw[:400])
        if r.status != 200:
            return r
        delimited = r.chunked or bool(cls)
        if req.method == "HEAD":
            if req.expect is not None and cls and cls[0].isdigit() \
                    and int(cls[0]) != len(req.expect):
                d.violation("wrong-length", self, "%r: HEAD Content-Length "
                            "%s, the object has %d bytes" % (
                                req, cls[0], len(req.expect)), req,
                            r.raw[:400])
            return r
        if req.expect is not None:
            self.body_is(req, r, lambda b: b == req.expect, delimited,
                         lambda b: req.expect.startswith(b))
        elif req.allowed is not None:
            self.body_is(req, r, req.allowed, delimited,
                         lambda b: any(a.startswith(b)
                                       for a in d.pushed[req.path]))
        elif req.echo is not None and req.kind == "echo":
            try:
                got = json.loads(r.body.decode())["body"].encode("latin-1")
            except (ValueError, KeyError, UnicodeDecodeError):
                got = None
            if got is None and not delimited:
                return r        # cut short by the close: cannot tell
            ok = got == req.echo or (req.method == "GET" and got == b"")
            if not ok:
                d.violation("wrong-body", self, "%r: the origin saw a body of "
                            "%s bytes, %d were sent" % (
                                req, "?" if got is None else len(got),
                                len(req.echo)), req, r.raw[:400])
            else:
                d.count("echo-ok")
        elif req.path.startswith("/_stats"):
            try:
                json.loads(r.body.decode())["global"]
            except (ValueError, KeyError, UnicodeDecodeError):
                if delimited:
                    d.violation("wrong-body", self, "/_stats is not JSON",
                                req, r.raw[:400])
        return r

    def body_is(self, req, r, ok, delimited, prefix_ok):
        d = self.d
        b = r.body
        if ok(b):
            with d.lock:
                d.bodies_checked += 1
                d.bytes_checked += len(b)
            return
        if not delimited and prefix_ok(b):
            # close-delimited and cut short: the client cannot tell
            d.count("close-delimited-short")
            return
        want = req.expect
        where = ""
        if want is not None:
            i = next((k for k in range(min(len(b), len(want)))
                      if b[k] != want[k]), min(len(b), len(want)))
            where = ", want %d; first difference at %d: got %r" % (
                len(want), i, b[i:i + 16])
        d.violation("wrong-body", self, "%r: %s %d-byte body%s (Cache-Status"
                    " %r)" % (req, "chunked" if r.chunked else "length",
                              len(b), where, r.header("Cache-Status")),
                    req, r.raw[:200])

    def collect(self, c, timeout, settle=0.0):
        """Read c until every pending request is answered, EOF or timeout;
        check each complete response.  With settle, keep reading that
        long after the last answer for bytes nobody asked for.  Returns
        (responses, state): state is "ok", "eof", "timeout" or "garbage".
        """
        out = []
        deadline = time.monotonic() + timeout
        while True:
            methods = [q.method for q in c.pending]
            rs, used, err = _parse(c.buf, methods, c.eof)
            if err:
                if c.pending:
                    self.d.violation("garbage", self, "%s (answering %r)"
                                     % (err, c.pending[0]), c.pending[0],
                                     c.buf[:400])
                else:
                    self.d.violation("extra-response", self, "bytes after "
                                     "every request was answered: %s" % err,
                                     c.sent_bytes(), c.buf[:400])
                c.buf = b""
                c.pending = []
                return out, "garbage"
            extra = rs[len(c.pending):]
            for r, q in zip(rs, c.pending):
                out.append(self.check(q, r))
                if r.has_token("Connection", "close"):
                    c.closing = True
            c.answered += min(len(rs), len(c.pending))
            if extra:
                self.d.violation("extra-response", self, "%d response(s) on "
                                 "a connection with %d request(s) sent "
                                 "(%d answered before)" % (
                                     len(extra), c.sent, c.answered),
                                 c.sent_bytes(),
                                 b"".join(x.raw for x in extra)[:400])
            c.pending = c.pending[len(rs):]
            c.buf = c.buf[used:]
            if not c.pending:
                if c.buf and (c.eof or len(c.buf) > 65536):
                    self.d.violation("extra-response", self, "bytes after "
                                     "every request (%d) was answered"
                                     % c.sent, c.sent_bytes(), c.buf[:400])
                    c.buf = b""
                if settle <= 0 or c.eof:
                    return out, ("eof" if c.eof else "ok")
                if not c.recv(settle):
                    settle = 0
                continue
            if c.eof:
                return out, "eof"
            left = deadline - time.monotonic()
            if left <= 0:
                return out, "timeout"
            c.recv(min(left, 1.0))

    def judge(self, c, state, reqs, answered, fresh):
        """Availability verdict when reqs[answered] (the first one left
        unanswered) is a well-behaved request for a healthy URL; a request
        that may be refused (a fault, a body, a malformed one) excuses the
        rest of the connection, and so does a Connection: close.  Returns
        True when the close crossed a request on a reused idle connection
        (the caller may retry: that is how keep-alive ends)."""
        if answered >= len(reqs) or state in ("ok", "garbage"):
            return False
        q = reqs[answered]
        if q.kind != "healthy" or c.closing:
            self.d.count("unanswered-after-refusal")
            return False
        if state == "timeout":
            self.d.availability("timeout", self, "%r: no complete answer in "
                                "%.0f s (%d bytes buffered)"
                                % (q, HEALTHY_TIMEOUT, len(c.buf)), q,
                                c.buf[:300])
        elif c.buf:
            self.d.availability("incomplete", self, "%r: closed mid-response"
                                " (%d bytes)" % (q, len(c.buf)), q,
                                c.buf[:300])
        elif fresh or c.answered > 0 and answered > 0:
            self.d.availability("no-response", self, "%r: closed without a"
                                " response" % q, q)
        else:
            self.d.count("idle-close-race")
            return True
        return False

    def single(self, req, timeout, settle=0.0):
        """req on a new connection; returns its response or None."""
        c = Conn(self.d)
        try:
            c.send(req)
            rs, state = self.collect(c, timeout, settle)
            self.judge(c, state, [req], len(rs), True)
            return rs[0] if rs else None
        finally:
            c.close()

    def keepalive(self, reqs, timeout=HEALTHY_TIMEOUT, pipeline=False,
                  retried=False):
        """Send reqs on this thread's keep-alive connection (new when
        needed), one by one or all at once; check the answers.  When the
        daemon closed the idle connection as we reused it, once more on a
        new one."""
        fresh = False
        if self.ka is not None and (self.ka.eof or self.ka.closing):
            self.drop_ka()
        if self.ka is None:
            self.ka = Conn(self.d)
            fresh = True
        c = self.ka
        if not fresh:
            # anything unsolicited waiting?  (a 408 before the close is
            # allowed; anything else is an extra response)
            c.recv(0.001)
            if c.buf:
                if c.buf.startswith(b"HTTP/1.1 408") and \
                        b"close" in c.buf.lower():
                    self.d.count("idle-408")
                else:
                    self.d.violation("extra-response", self, "bytes on an "
                                     "idle connection", None, c.buf[:400])
                self.drop_ka()
                return self.keepalive(reqs, timeout, pipeline, retried)
            if c.eof:
                self.drop_ka()
                return self.keepalive(reqs, timeout, pipeline, retried)
        state, done = "ok", 0
        try:
            if pipeline:
                c.pending += reqs
                c.sent += len(reqs)
                c.send_bytes(b"".join(q.bytes for q in reqs))
                rs, state = self.collect(c, timeout)
                done = len(rs)
                retry = self.judge(c, state, reqs, done, fresh)
            else:
                for q in reqs:
                    c.send(q)
                    rs, state = self.collect(c, timeout)
                    retry = self.judge(c, state, [q], len(rs), fresh)
                    fresh = False
                    if state != "ok" or c.closing:
                        break
                    done += 1
        except OSError as e:
            retry = True
            if fresh and retried and reqs[done].kind == "healthy":
                self.d.availability("no-response", self, "%r: %s on a new "
                                    "connection" % (reqs[done], e),
                                    reqs[done])
        if state != "ok" or c.closing or self.rng.random() < 0.1:
            self.drop_ka()
        if retry and not retried and done < len(reqs):
            self.drop_ka()
            self.keepalive(reqs[done:], timeout, pipeline, True)

    # -- URLs ------------------------------------------------------------------
    def hot(self):
        return self.rng.choice(self.d.hot)

    def miss_path(self):
        n = self.rng.choice([0, 10, 700, 5000, 40000, 200000])
        kind = self.rng.choice(["bytes", "bytes", "chunked", "no-length"])
        tail = self.rng.choice([CC, "", "headers?Cache-Control=no-store",
                                "headers?Cache-Control=max-age%3D1"])
        p = "/seed/m%s/%s/%d" % (self.uniq(), kind, n)
        return p + ("/" + tail if tail else "")

    def fault_path(self):
        """A URL whose origin misbehaves (unique, or one of a few shared
        ones so that collapsed waiters see the failure too)."""
        r = self.rng
        u = self.uniq() if r.random() < 0.8 else "shared%d" % r.randrange(3)
        n = r.choice([100, 5000, 70000, 400000])
        f = r.choice([
            "slow-body/%d/%d" % (n, r.choice([20, 100, 300])),
            "delay/%d/bytes/%d" % (r.choice([50, 500, 2500]), n),
            "hang", "stall/%d" % n, "close", "reset",
            "close-mid-body/%d" % n, "bad-head/%d" % r.randrange(len(BAD_HEADS)),
            "bytes/%d/extra-resp/%d" % (n, r.choice([1, 60, 3000])),
            "chunked/%d/extra-resp/%d" % (n, r.choice([1, 60, 3000])),
            "blank-lines", "no-length/%d/conn-close" % n,
            "status/500/bytes/%d" % (n % 3000),
            "status/404/bytes/%d/%s" % (n % 3000, CC),
            "bytes/%d/drop-next" % n, "bytes/%d/close-idle/50" % n,
        ])
        cc = "/" + CC if r.random() < 0.5 and "headers" not in f else ""
        return "/seed/f%s/%s%s" % (u, f, cc)

    def req(self, method, path, **kw):
        return Req(method, path, self.d.host, **kw)

    # -- actions -----------------------------------------------------------------
    def act_hit(self):
        self.keepalive([self.req("GET", self.hot())
                        for _ in range(self.rng.randint(1, 4))])

    def act_miss(self):
        self.keepalive([self.req("GET", self.miss_path())])

    def act_head(self):
        p = self.hot() if self.rng.random() < 0.6 else self.miss_path()
        self.keepalive([self.req("HEAD", p)])

    def act_pipeline(self):
        reqs = []
        for _ in range(self.rng.randint(2, 8)):
            x = self.rng.random()
            if x < 0.4:
                reqs.append(self.req("GET", self.hot()))
            elif x < 0.6:
                reqs.append(self.req("GET", self.miss_path()))
            elif x < 0.7:
                reqs.append(self.req("HEAD", self.hot()))
            elif x < 0.8:
                reqs.append(self.req("GET", "/_stats", kind="admin"))
            elif x < 0.9:
                reqs.append(self.echo_req("POST"))
            else:
                reqs.append(self.push_get())
        if self.rng.random() < 0.2:
            reqs.append(self.req("GET", self.fault_path(), kind="fault"))
        self.keepalive(reqs, pipeline=True)

    def echo_req(self, method, chunked=False):
        body = seeded("b" + self.uniq(), self.rng.choice([0, 1, 300, 5000,
                                                          70000]))
        path = "/echo/%s" % self.uniq()
        if chunked:
            q = self.req(method, path, chunked=chunk_encode(
                self.rng, body, self.rng.random() < 0.3), kind="echo")
        else:
            q = self.req(method, path, body=body, kind="echo")
        q.echo = body.decode("latin-1").encode("latin-1")
        return q

    def act_post(self):
        self.keepalive([self.echo_req("POST", self.rng.random() < 0.4)])

    def act_get_body(self):
        self.keepalive([self.echo_req("GET", self.rng.random() < 0.3)])

    def act_expect100(self):
        body = seeded("e" + self.uniq(), self.rng.choice([10, 20000]))
        q = self.req("POST", "/echo/%s" % self.uniq(), kind="echo",
                     headers=[("Expect", "100-continue")], body=body)
        q.echo = body
        c = Conn(self.d)
        try:
            head, tail = q.bytes[:-len(body)], body
            c.pending.append(q)
            c.sent += 1
            c.send_bytes(head)
            c.recv(self.rng.choice([0.0, 0.3]))
            c.send_bytes(tail)
            rs, state = self.collect(c, HEALTHY_TIMEOUT)
            self.judge(c, state, [q], len(rs), True)
        finally:
            c.close()

    def act_bad_chunked(self):
        """Malformed chunked bodies; a request hidden after them must never
        be answered on its own."""
        r = self.rng
        smug = ("GET /seed/smuggled%s/bytes/7 HTTP/1.1\r\nHost: %s\r\n\r\n"
                % (self.uniq(), self.d.host)).encode()
        bad = r.choice([
            b"zz\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloXX\r\n0\r\n\r\n",
            b"-5\r\nhello\r\n0\r\n\r\n",
            b"ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"5\nhello\n0\n\n",
            b"0x5\r\nhello\r\n0\r\n\r\n",
            b"5;" + b"e" * 20000 + b"\r\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\nBad Trailer\r\n\r\n",
            b"5\r\nhel",
            b"3\r\nabc\r\n",
        ])
        q = self.req("POST", "/echo/%s" % self.uniq(), raw=None,
                     kind="malformed", chunked=bad)
        q.bytes += smug
        self.expect_at_most_one(q)

    def expect_at_most_one(self, q, half_close=False):
        c = Conn(self.d)
        try:
            c.pending.append(q)
            c.sent += 1
            try:
                c.send_bytes(q.bytes)
                if half_close:
                    c.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            # Read until the close (or a while): a second response would be
            # a request smuggled past the first.
            self.collect(c, FAULT_TIMEOUT, settle=1.5)
        finally:
            c.close()

    def act_smuggle(self):
        r = self.rng
        h = self.d.host
        inner = ("GET /seed/smuggled%s/bytes/9 HTTP/1.1\r\nHost: %s\r\n\r\n"
                 % (self.uniq(), h)).encode()
        te = r.choice([
            "Transfer-Encoding: chunked",
            "Transfer-Encoding: CHUNKED",
            "Transfer-Encoding: chunked, identity",
            "Transfer-Encoding: identity, chunked",
            "Transfer-Encoding: xchunked",
            "Transfer-Encoding : chunked",
            "Transfer-Encoding:\tchunked",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
            " Transfer-Encoding: chunked",
            "Transfer-Encoding:\x0bchunked",
            "Transfer_Encoding: chunked",
        ])
        body = b"0\r\n\r\n" + inner
        kind = r.randrange(3)
        if kind == 0:       # CL and TE: one reading ends at 0\r\n\r\n
            head = "POST /echo/%s HTTP/1.1\r\nHost: %s\r\n%s\r\n" \
                "Content-Length: %d\r\n\r\n" % (self.uniq(), h, te, len(body))
            data = head.encode() + body
        elif kind == 1:     # two different Content-Lengths
            head = "POST /echo/%s HTTP/1.1\r\nHost: %s\r\nContent-Length: " \
                "5\r\nContent-Length: %d\r\n\r\n" % (self.uniq(), h, len(body))
            data = head.encode() + body
        else:               # a Content-Length some parsers misread
            cl = r.choice(["+%d", "%d.0", "0%d", "%d ,%d", "0x%x", " %d",
                           "%d\x00"])
            n = len(body)
            v = cl % ((n, n) if cl.count("%") == 2 else (n,))
            head = "POST /echo/%s HTTP/1.1\r\nHost: %s\r\nContent-Length: " \
                "%s\r\n\r\n" % (self.uniq(), h, v)
            data = head.encode("latin-1") + body
        q = self.req("POST", "/", raw=data, kind="malformed")
        self.expect_at_most_one(q)

    MALFORMED = [
        b"G@T / HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET /\x00x HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET / HTTP/9.9\r\nHost: H\r\n\r\n",
        b"GET / HTTP/1.1 extra\r\nHost: H\r\n\r\n",
        b"GET  / HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\n Folded: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nBad Header\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\n: empty-name\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nX: " + b"a" * 100000 + b"\r\n\r\n",
        b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nHost: other\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET http://H:99999/ HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET http://[::1 HTTP/1.1\r\nHost: H\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nContent-Length: -1\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nContent-Length: 1e3\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nContent-Length: 99999999999999999999"
        b"\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: H\r\nTransfer-Encoding: gzip\r\n\r\nxx",
        b"GET / HTTP/1.1\r\nHost: H\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nX:\x7f\x00\x01\r\n\r\n",
        b"GET /%zz HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET ../../etc/passwd HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET * HTTP/1.1\r\nHost: H\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: H\r\n\r\n",
        b"CONNECT H:80 HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: H\r\nExpect: 100-continue\r\n"
        b"Content-Length: 10\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: H\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"0\r\n\r\n",
        b"\r\n" * 3000 + b"GET / HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"X-Many: y\r\n" * 3000 + b"Host: H\r\n\r\n",
        b"PUSH /x HTTP/1.1\r\nHost: H\r\nContent-Length: 5\r\n\r\nHTTP/",
        b"PUSH /x HTTP/1.1\r\nHost: H\r\nContent-Length: 30\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"PURGE * HTTP/1.1\r\nHost: H\r\n\r\n",
        b"GET /_stats?" + b"q" * 9000 + b" HTTP/1.1\r\nHost: H\r\n\r\n",
    ]

    def act_malformed(self):
        r = self.rng
        if r.random() < 0.6:
            h = self.d.host.encode()
            data = r.choice(self.MALFORMED).replace(b"Host: H", b"Host: " + h)
            data = data.replace(b"//H:", b"//" + h + b":")
            data = data.replace(b"CONNECT H:", b"CONNECT " + h + b":")
        else:
            # a valid request with a few random byte edits
            base = bytearray(self.req("GET", self.hot()).bytes)
            for _ in range(r.randint(1, 4)):
                i = r.randrange(len(base))
                op = r.random()
                if op < 0.4:
                    base[i] = r.randrange(256)
                elif op < 0.7:
                    del base[i]
                else:
                    base[i:i] = bytes([r.choice(b"\r\n :\x00\t\"")])
            data = bytes(base)
        q = self.req("GET", "/", raw=data, kind="malformed")
        self.expect_at_most_one(q, half_close=r.random() < 0.5)

    def push_get(self):
        p = self.rng.choice(self.d.push_paths)
        q = self.req("GET", p, kind="push")
        pushed = self.d.pushed[p]
        q.allowed = lambda b, s=pushed: b in s
        return q

    def act_push(self):
        r = self.rng
        p = r.choice(self.d.push_paths)
        body = seeded("push:%s:%s" % (p, self.uniq()),
                      r.choice([0, 5, 3000, 70000]))
        with self.d.lock:
            self.d.pushed[p].add(body)
        resp = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body)) + body
        q = self.req("PUSH", p, body=resp, kind="push-req")
        self.keepalive([q, self.push_get()] if r.random() < 0.5 else [q])

    def act_purge(self):
        r = self.rng
        p = r.choice(self.d.push_paths) if r.random() < 0.7 else self.hot()
        self.keepalive([self.req("PURGE", p, kind="purge")]
                       + ([self.push_get()] if r.random() < 0.5 else []))

    def act_admin(self):
        p = self.rng.choice(["/_stats", "/_metrics", "/_stats?x=1"])
        self.keepalive([self.req(self.rng.choice(["GET", "GET", "HEAD"]),
                                 p, kind="admin")])

    def act_fault(self):
        q = self.req(self.rng.choice(["GET"] * 5 + ["HEAD"]),
                     self.fault_path(), kind="fault")
        if self.rng.random() < 0.5:
            self.keepalive([q], timeout=FAULT_TIMEOUT)
            return
        c = Conn(self.d)
        try:
            c.send(q)
            rs, state = self.collect(c, FAULT_TIMEOUT)
            if state == "timeout":
                self.d.availability("timeout", self, "%r: neither answer nor "
                                    "close in %.0f s" % (q, FAULT_TIMEOUT), q,
                                    c.buf[:300])
        finally:
            c.close()

    def act_slow_reader(self):
        r = self.rng
        p = r.choice(self.d.big) if r.random() < 0.7 else \
            "/seed/sr%s/bytes/%d" % (self.uniq(), r.choice(BIG_SIZES))
        q = self.req("GET", p)
        c = Conn(self.d, rcvbuf=4096)
        try:
            c.send(q)
            end = time.monotonic() + r.uniform(0.5, 6.0)
            while time.monotonic() < end and not c.eof:
                c.recv(1.0, r.choice([512, 4096]))
                time.sleep(r.choice([0.005, 0.02, 0.1]))
            how = r.random()
            if how < 0.5:
                rs, state = self.collect(c, HEALTHY_TIMEOUT)
                self.judge(c, state, [q], len(rs), True)
            elif how < 0.8:
                c.close(reset=True)
            else:
                c.close()
        finally:
            c.close()

    def act_half_close(self):
        x = self.rng.random()
        if x < 0.5:
            q = self.req("GET", self.hot())
        elif x < 0.75:
            q = self.req("GET", self.miss_path())
        else:
            q = self.req("GET", self.fault_path(), kind="fault")
        c = Conn(self.d)
        try:
            c.send(q)
            c.sock.shutdown(socket.SHUT_WR)
            rs, state = self.collect(c, HEALTHY_TIMEOUT)
            if not rs:
                # RFC 9112 lets a server treat the half-close as the end:
                # counted, not a violation; a partial answer still is, and
                # so is no answer and no close at all.
                self.d.count("half-close-unanswered")
                if state == "timeout":
                    self.d.availability("timeout", self, "%r after a "
                                        "half-close: neither answer nor close"
                                        " in %.0f s" % (q, HEALTHY_TIMEOUT),
                                        q, c.buf[:300])
        finally:
            c.close()

    def act_reset(self):
        r = self.rng
        x = r.random()
        path = r.choice([self.hot(), self.miss_path(), self.fault_path(),
                         r.choice(self.d.big)])
        q = self.req("GET", path, kind="fault")
        c = Conn(self.d)
        try:
            if x < 0.3:
                c.send_bytes(q.bytes[:r.randrange(1, len(q.bytes))])
            else:
                c.send(q)
                time.sleep(r.choice([0, 0.001, 0.01, 0.05, 0.2]))
                if r.random() < 0.5:
                    c.recv(0.2, r.choice([1, 100, 65536]))
        finally:
            c.close(reset=True)

    def act_silent(self):
        r = self.rng
        c = Conn(self.d)
        try:
            x = r.random()
            if x < 0.3:
                pass                    # connect, say nothing
            elif x < 0.6:
                q = self.req("GET", self.hot())
                c.send_bytes(q.bytes[:r.randrange(1, len(q.bytes))])
            else:
                # a body announced and never sent
                c.send_bytes(self.req("POST", "/echo/%s" % self.uniq(),
                                      kind="echo").bytes[:-2]
                             + b"Content-Length: 5000\r\n\r\nabc")
            t = r.uniform(0.3, 4.0)
            end = time.monotonic() + t
            while time.monotonic() < end and not c.eof:
                c.recv(end - time.monotonic())
            if c.buf:
                rs, used, err = _parse(c.buf, None, c.eof)
                if err:
                    self.d.violation("garbage", self, "answer to a silent "
                                     "client: %s" % err, None, c.buf[:300])
                elif len(rs) > 1:
                    self.d.violation("extra-response", self, "%d responses "
                                     "to a silent client" % len(rs), None,
                                     c.buf[:300])
        finally:
            c.close(reset=r.random() < 0.3)

    def act_trickle(self):
        """A well-behaved but slow client: the request a few bytes at a
        time (inside the header timeout)."""
        q = self.req("GET", self.hot())
        c = Conn(self.d)
        try:
            data = q.bytes
            i = 0
            c.pending.append(q)
            c.sent += 1
            while i < len(data):
                n = self.rng.randint(1, 12)
                c.send_bytes(data[i:i + n])
                i += n
                time.sleep(0.01)
            rs, state = self.collect(c, HEALTHY_TIMEOUT)
            self.judge(c, state, [q], len(rs), True)
        finally:
            c.close()


# (name, weight)
ACTIONS = [
    ("hit", 20), ("miss", 10), ("head", 3), ("pipeline", 8), ("post", 4),
    ("get-body", 3), ("expect100", 2), ("bad-chunked", 3), ("smuggle", 4),
    ("malformed", 6), ("push", 5), ("purge", 2), ("admin", 2),
    ("fault", 10), ("slow-reader", 3), ("half-close", 3), ("reset", 4),
    ("silent", 2), ("trickle", 2),
]


def run(port, **kw):
    """Run the driver; returns the report dict ("violations" empty when
    every invariant held)."""
    return Driver(port, **kw).run()


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Random hostile traffic against a running Cistern, "
        "checking invariants (see the module docstring).")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--host", default="c.test",
                    help="Host header; Cistern maps it to a t/origin.py")
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("CISTERN_CHAOS_SECONDS",
                                                 60)))
    ap.add_argument("--seed", type=int,
                    default=(int(os.environ["CISTERN_CHAOS_SEED"])
                             if os.environ.get("CISTERN_CHAOS_SEED")
                             else None))
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--master-pid", type=int,
                    help="check the workers (pids, fds, RssAnon)")
    ap.add_argument("--mode", choices=["chaos", "soak"], default="chaos")
    ap.add_argument("--only", help="comma-separated actions: " + ", ".join(
        n for n, _ in ACTIONS))
    ap.add_argument("--fd-slack", type=int, default=72,
                    help="fds a worker may end with above its start (its "
                    "origin pool: per_server.connection.max_idle)")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--trace", help="append every byte string sent to this "
                    "file (time, thread, action, local port, bytes)")
    a = ap.parse_args(argv)
    only = a.only.split(",") if a.only else None
    if only and set(only) - {n for n, _ in ACTIONS}:
        ap.error("unknown action in --only: %s" % a.only)
    rep = run(a.port, host=a.host, addr=a.addr, seconds=a.seconds,
              seed=a.seed, concurrency=a.concurrency,
              master_pid=a.master_pid, mode=a.mode, only=only,
              fd_slack=a.fd_slack, trace=a.trace)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rep, f, indent=1)
    return 1 if rep["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
