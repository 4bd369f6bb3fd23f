#!/usr/bin/env python3
"""Read-while-writer across workers (issue 21 stage 3).

A GET for an object that any worker is filling from the origin (a
Content-Length over 1 MiB) joins the fill: it is answered at once from the
bytes already stored and follows the fill as it grows, woken by the filler
(no polling), at its own pace.

- 20 clients join a miss at random times during a 20 s origin transfer
  (20 MiB at 1 MiB/s) over two workers: one origin request, every body
  byte-exact, each joiner's first body byte within 100 ms of its request
  (max and p50 printed);
- a slow joiner (1 MiB/s) does not slow a fast one;
- the origin dies at 50%: every client sees a body short of its
  Content-Length (never a complete-looking one), nothing is stored;
- a Range request during a fill goes to the origin at once;
- a slow joiner outliving its fill's slot in the fill table;
- the filling client leaving early: the fill goes on for its joiners;
- proxy.config.cache.enable_read_while_writer 0: a joiner of a large fill
  goes to the origin itself (as before this stage).
"""

import hashlib
import random
import re
import socket
import statistics
import threading
import time

import harness
from harness import Cistern, Origin, expect, expect_eq, is_hit

HOST = "r.test"
LONG = "headers?Cache-Control=max-age%3D3600"
MiB = 1 << 20


def remap_for(o):
    return ["map http://%s/ http://%s/" % (HOST, o.authority)]


def seeded_sha(seed, n):
    gen = random.Random("cistern-seed:" + str(seed))
    h = hashlib.sha256()
    piece = 256 * 1024
    for j in range(0, n, piece):
        h.update(gen.randbytes(min(piece, n - j)))
    return h.hexdigest()


class Client(threading.Thread):
    """GET path at time `at` (seconds after t0); records the time from the
    request to the first body byte, the headers, the body's length and
    SHA-256, and when it ended.  rate: read at about rate bytes/s."""

    def __init__(self, port, path, t0, at, rate=None, leave=None):
        super().__init__(daemon=True)
        self.leave = leave      # close after this many body bytes
        self.port, self.path, self.t0, self.at, self.rate = port, path, t0, at, rate
        self.first = None
        self.status = None
        self.hdrs = {}
        self.got = 0
        self.sha = None
        self.want = -1
        self.end = None
        self.err = None

    def run(self):
        try:
            self._run()
        except Exception as e:      # reported by the test
            self.err = repr(e)
        self.end = time.monotonic() - self.t0

    def _run(self):
        delay = self.t0 + self.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        try:
            if self.rate:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sent = time.monotonic()
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                       % (self.path, HOST)).encode())
            buf = b""
            while True:
                i = buf.find(b"\r\n\r\n")
                if i >= 0 and len(buf) > i + 4:
                    break
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            self.first = time.monotonic() - sent
            head, rest = buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            self.status = int(lines[0].split()[1])
            for ln in lines[1:]:
                k, v = ln.split(":", 1)
                self.hdrs[k.strip().lower()] = v.strip()
            self.want = int(self.hdrs.get("content-length", "-1"))
            h = hashlib.sha256(rest)
            self.got = len(rest)
            while self.got < self.want:
                if self.leave is not None and self.got >= self.leave:
                    break
                try:
                    d = s.recv(1 << 20 if self.rate is None else 32768)
                except ConnectionResetError:
                    break
                if not d:
                    break
                h.update(d)
                self.got += len(d)
                if self.rate:
                    time.sleep(len(d) / self.rate)
            self.sha = h.hexdigest()
        finally:
            s.close()


def origin_count(o, p):
    return len([q for q in o.requests() if q["target"] == p])


@harness.timeout(150)
def test_twenty_joiners():
    """20 clients over a 20 s transfer: one origin request, all byte-exact,
    each joiner's first byte within 100 ms; joiners served by both
    workers."""
    n, rate = 20 * MiB, MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2, remap=remap_for(o),
                                records={"proxy.config.cistern.debug_headers": 1}) as c:
        p = "/seed/rww20/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rww20", n)
        rnd = random.Random(21)
        t0 = time.monotonic()
        ats = [0.0] + sorted(rnd.uniform(0.5, 18.0) for _ in range(19))
        cl = [Client(c.port, p, t0, at) for at in ats]
        for x in cl:
            x.start()
        for x in cl:
            x.join(120)
        for i, x in enumerate(cl):
            expect(x.err is None, "client %d (at %.2f s): %s" % (i, x.at, x.err))
            expect_eq(x.status, 200, "client %d status" % i)
            expect_eq(x.got, n, "client %d body length" % i)
            expect_eq(x.sha, want, "client %d body SHA-256" % i)
        joiners = cl[1:]
        lat = sorted(x.first * 1000 for x in joiners)
        print("  joiners' first body byte: max %.1f ms, p50 %.1f ms (19 joiners)"
              % (lat[-1], statistics.median(lat)))
        rww = [x for x in joiners if "read-while-writer" in x.hdrs.get("cache-status", "")]
        workers = {x.hdrs.get("x-cistern-worker", "").split(";")[0] for x in rww}
        print("  %d of 19 joined the fill (the rest were hits after it), "
              "on workers %s" % (len(rww), sorted(workers)))
        expect_eq(origin_count(o, p), 1, "origin requests")
        expect(lat[-1] < 100, "a joiner waited %.1f ms for its first byte" % lat[-1])
        expect(len(rww) >= 15, "only %d joiners followed the fill" % len(rww))
        expect(len(workers) == 2, "joiners on one worker only: %r" % workers)
        r = harness.one_request(c.port, "GET", p, None, (), HOST, None, 30)
        expect(is_hit(r), "stored after the fill (%r)" % r.header("Cache-Status"))


@harness.timeout(90)
def test_slow_joiner_does_not_slow_fast_one():
    """8 MiB at 2 MiB/s: a joiner reading at 1 MiB/s and a fast joiner,
    both joining at 1 s; the fast one ends with the fill (~4 s), the slow
    one about 5 s later, both byte-exact."""
    n, rate = 8 * MiB, 2 * MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2,
                                remap=remap_for(o)) as c:
        p = "/seed/rwwslow/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwslow", n)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0)
        slow = Client(c.port, p, t0, 1.0, rate=MiB)
        fast = Client(c.port, p, t0, 1.05)
        for x in (filler, slow, fast):
            x.start()
        for x in (filler, slow, fast):
            x.join(60)
        for name, x in (("filler", filler), ("slow", slow), ("fast", fast)):
            expect(x.err is None, "%s: %s" % (name, x.err))
            expect_eq(x.sha, want, name + " body SHA-256")
        print("  filler ended at %.2f s, fast joiner %.2f s, slow joiner %.2f s"
              % (filler.end, fast.end, slow.end))
        expect("read-while-writer" in fast.hdrs.get("cache-status", ""), "fast joined")
        expect("read-while-writer" in slow.hdrs.get("cache-status", ""), "slow joined")
        expect(fast.end < filler.end + 1.5, "the fast joiner lagged the fill: %.2f vs %.2f"
               % (fast.end, filler.end))
        expect(slow.end > fast.end + 2.0, "the slow joiner was not slow (%.2f)" % slow.end)
        expect_eq(origin_count(o, p), 1, "origin requests")


@harness.timeout(90)
def test_origin_dies_at_half():
    """8 MiB at 2 MiB/s, the origin closing at 50%: the filler and three
    joiners all get 200 with Content-Length 8 MiB and fewer bytes (the
    connection cut), and the next GET goes to the origin again."""
    n, rate = 8 * MiB, 2 * MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2,
                                remap=remap_for(o)) as c:
        p = "/seed/rwwdie/stream/%d/rate/%d/die-at/50/%s" % (n, rate, LONG)
        t0 = time.monotonic()
        cl = [Client(c.port, p, t0, at) for at in (0.0, 0.5, 1.0, 1.5)]
        for x in cl:
            x.start()
        for x in cl:
            x.join(60)
        joined = 0
        for i, x in enumerate(cl):
            expect_eq(x.status, 200, "client %d status" % i)
            expect_eq(x.want, n, "client %d Content-Length" % i)
            expect(x.got < n, "client %d: a truncated body looked complete" % i)
            joined += "read-while-writer" in x.hdrs.get("cache-status", "")
        expect_eq(joined, 3, "joiners")
        expect_eq(origin_count(o, p), 1, "origin requests")
        r = harness.one_request(c.port, "GET", p, None, (), HOST, None, 30,
                                close_delimited_ok=True)
        expect(r is None or not is_hit(r), "the truncated object was stored")
        expect_eq(origin_count(o, p), 2, "origin requests after")


@harness.timeout(60)
def test_filler_leaves_joiner_stays():
    """The filling client leaves at 20% (under the 0.5 background fill
    threshold) while a joiner follows: the fill goes on for the joiner,
    which gets every byte, and the object is stored (one origin request)."""
    n, rate = 4 * MiB, 2 * MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2,
                                remap=remap_for(o)) as c:
        p = "/seed/rwwleave/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwleave", n)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, leave=n // 5)
        joiner = Client(c.port, p, t0, 0.2)
        for x in (filler, joiner):
            x.start()
        for x in (filler, joiner):
            x.join(60)
        expect(filler.got < n, "the filler read everything")
        expect("read-while-writer" in joiner.hdrs.get("cache-status", ""), "joined")
        expect_eq(joiner.sha, want, "joiner body SHA-256")
        r = harness.one_request(c.port, "GET", p, None, (), HOST, None, 30)
        expect(is_hit(r), "stored (%r)" % r.header("Cache-Status"))
        expect_eq(origin_count(o, p), 1, "origin requests")


@harness.timeout(60)
def test_range_during_fill_goes_to_origin():
    """A Range request for an object being filled (4 MiB at 1 MiB/s) is not
    joined and does not wait for the fill: its answer starts within 2 s
    (from a second origin request)."""
    n, rate = 4 * MiB, MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2,
                                remap=remap_for(o)) as c:
        p = "/seed/rwwrange/stream/%d/rate/%d/%s" % (n, rate, LONG)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0)
        filler.start()
        harness.wait_for(lambda: origin_count(o, p) == 1, 10, what="the fill")
        time.sleep(0.5)
        t1 = time.monotonic()
        with socket.create_connection(("127.0.0.1", c.port), timeout=30) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nRange: bytes=100-199\r\n"
                       "Connection: close\r\n\r\n" % (p, HOST)).encode())
            first = s.recv(65536)
            took = time.monotonic() - t1
        filler.join(60)
        expect(re.match(rb"HTTP/1.1 20[06] ", first), "the Range answer: %r" % first[:40])
        expect(took < 2.0, "the Range request waited %.2f s for the fill" % took)
        expect_eq(origin_count(o, p), 2, "origin requests")
        expect_eq(filler.got, n, "the filler's body")


@harness.timeout(60)
def test_slow_joiner_outlives_its_slot():
    """A slow joiner (1 MiB/s) of a 16 MiB fill that ended at ~2 s keeps
    sending byte-exact after the fill table's slot went to another fill
    (5 s after the end) whose joiner woke the same worker; the slow one is
    then still ~8 MiB from its end, more than socket buffers hold."""
    n = 16 * MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=1,
                                remap=remap_for(o)) as c:
        pa = "/seed/rwwa/stream/%d/rate/%d/%s" % (n, 8 * MiB, LONG)
        pb = "/seed/rwwb/stream/%d/rate/%d/%s" % (2 * MiB, 2 * MiB, LONG)
        t0 = time.monotonic()
        fa = Client(c.port, pa, t0, 0.0)
        slow = Client(c.port, pa, t0, 0.3, rate=MiB)
        fb = Client(c.port, pb, t0, 7.6)
        jb = Client(c.port, pb, t0, 7.9)
        for x in (fa, slow, fb, jb):
            x.start()
        for x in (fa, slow, fb, jb):
            x.join(60)
        expect("read-while-writer" in slow.hdrs.get("cache-status", ""), "slow joined")
        expect("read-while-writer" in jb.hdrs.get("cache-status", ""), "B's joiner joined")
        expect_eq(slow.got, n, "slow joiner body length (cut at %.2f s)" % slow.end)
        expect(slow.end > 10, "the slow joiner was not slow (%.2f s)" % slow.end)
        expect_eq(slow.sha, seeded_sha("rwwa", n), "slow joiner body SHA-256")
        expect_eq(jb.sha, seeded_sha("rwwb", 2 * MiB), "B's joiner body SHA-256")


@harness.timeout(60)
def test_disabled():
    """enable_read_while_writer 0: a joiner of a large fill fetches for
    itself (two origin requests), and is byte-exact."""
    n, rate = 4 * MiB, 4 * MiB
    with Origin() as o, Cistern(storage=["cache 256M"], workers=2, remap=remap_for(o),
                                records={"proxy.config.cache.enable_read_while_writer": 0}) as c:
        p = "/seed/rwwoff/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwoff", n)
        t0 = time.monotonic()
        cl = [Client(c.port, p, t0, at) for at in (0.0, 0.3)]
        for x in cl:
            x.start()
        for x in cl:
            x.join(60)
        for i, x in enumerate(cl):
            expect_eq(x.sha, want, "client %d body SHA-256" % i)
            expect("read-while-writer" not in x.hdrs.get("cache-status", ""), "joined")
        expect_eq(origin_count(o, p), 2, "origin requests")


if __name__ == "__main__":
    harness.main()
