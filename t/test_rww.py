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
  goes to the origin itself (as before this stage);
- HTTP/2 streams join as HTTP/1.1 clients do (h2c and TLS): beside
  HTTP/1.1 joiners, with a closed window beside a fast stream, reset when
  the origin dies, released when the client cancels the stream, closes
  the connection or is closed by our GOAWAY, outliving the fill's slot;
- a fill lapped by the ring while written is not stored, but its joiners
  get the whole body (their pins kept the extents).
"""

import hashlib
import os
import random
import re
import socket
import statistics
import threading
import time

import harness
import test_h2
from harness import Cistern, Origin, expect, expect_eq, is_hit

if test_h2.HAVE_H2:
    import h2.events
    import h2.settings

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


class Timed(threading.Thread):
    """A client that starts at `at` seconds after t0 and runs _run(): an
    exception goes to self.err, the time it ended (after t0) to self.end."""

    def __init__(self, t0, at):
        super().__init__(daemon=True)
        self.t0, self.at = t0, at
        self.end = self.err = None

    def run(self):
        try:
            delay = self.t0 + self.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._run()
        except Exception as e:      # reported by the test
            self.err = repr(e)
        self.end = time.monotonic() - self.t0


class Client(Timed):
    """GET path at time `at` (seconds after t0); records the time from the
    request to the first body byte, the headers, the body's length and
    SHA-256, and when it ended.  rate: read at about rate bytes/s."""

    def __init__(self, port, path, t0, at, rate=None, leave=None, host=HOST):
        super().__init__(t0, at)
        self.leave = leave      # close after this many body bytes
        self.port, self.path, self.rate = port, path, rate
        self.host = host
        self.first = None
        self.status = None
        self.hdrs = {}
        self.got = 0
        self.sha = None
        self.want = -1

    def _run(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        try:
            if self.rate:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sent = time.monotonic()
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                       % (self.path, self.host)).encode())
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



# ---------------------------------------------------------------------------
# HTTP/2 streams join fills as HTTP/1.1 clients do (test_h2.py's daemon:
# [0] HTTP/1.1, [1] TLS with ALPN h2, [2] h2c with prior knowledge; host
# www.test).

H2HOST = test_h2.HOST
CANCEL = 8                      # RFC 9113 7


class H2Stream:
    def __init__(self, stalled):
        self.stalled = stalled  # its window is never opened (the
        self.sent = time.monotonic()    # connection's is)
        self.first = None       # seconds from the request to the first DATA
        self.hdrs = {}
        self.got = 0
        self.h = hashlib.sha256()
        self.ended = False      # END_STREAM
        self.reset = None       # the RST_STREAM code

    def status(self):
        return int(self.hdrs.get(":status", "0"))

    def done(self):
        return self.ended or self.reset is not None


class H2Conn(test_h2.H2 if test_h2.HAVE_H2 else object):
    """One HTTP/2 connection (python3-h2: h2c, or TLS with ALPN h2) whose
    streams' bodies are hashed as they come, not kept (self.st: H2Stream
    by stream id)."""

    def __init__(self, c, tls=False, settings=None):
        super().__init__(c.ports[1] if tls else c.ports[2], settings=settings, tls=tls)
        self.st = {}
        self.rate = None

    def get(self, path, stalled=False):
        sid = self.c.get_next_available_stream_id()
        self.st[sid] = H2Stream(stalled)
        self.request(path)
        return sid

    def on_event(self, ev, ack):
        st = self.st.get(getattr(ev, "stream_id", None))
        if isinstance(ev, h2.events.ResponseReceived):
            st.hdrs = dict(ev.headers)
        elif isinstance(ev, h2.events.DataReceived):
            if st.first is None:
                st.first = time.monotonic() - st.sent
            st.h.update(ev.data)
            st.got += len(ev.data)
            if self.rate:
                time.sleep(len(ev.data) / self.rate)
            if st.stalled:
                self.c.increment_flow_control_window(ev.flow_controlled_length)
            elif st.reset is None:
                self.c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            st.ended = True
        elif isinstance(ev, h2.events.StreamReset):
            st.reset = ev.error_code
        else:
            super().on_event(ev, ack)

    def run(self, until, timeout=60.0, rate=None):
        """Read until until() is true, the peer closes or the time is up."""
        self.rate = rate
        return self.pump(until, timeout)

    def cancel(self, sid):
        self.st[sid].reset = CANCEL
        self.c.reset_stream(sid, error_code=CANCEL)
        # what was in flight for it is not given back (python3-h2 drops
        # DATA of a stream it reset): open the connection's window
        self.c.increment_flow_control_window(1 << 20)
        self.flush()


class H2Client(Timed):
    """A new HTTP/2 connection GETting path at `at` (seconds after t0), its
    stream in self.s (H2Stream).  rate: read at about rate bytes/s (the
    stream's window paces the sender); cancel_at: RST_STREAM(CANCEL)
    after that many body bytes, then keep the connection (self.conn);
    close_at: close the connection after that many."""

    def __init__(self, c, path, t0, at, tls=False, rate=None, cancel_at=None, close_at=None):
        super().__init__(t0, at)
        self.c, self.path, self.tls = c, path, tls
        self.rate, self.cancel_at, self.close_at = rate, cancel_at, close_at
        self.conn = self.s = None

    def _run(self):
        self.conn = h = H2Conn(self.c, tls=self.tls)
        sid = h.get(self.path)
        self.s = h.st[sid]
        stop = self.cancel_at or self.close_at
        h.run(lambda: self.s.done() or (stop is not None and self.s.got >= stop),
              timeout=60, rate=self.rate)
        if self.cancel_at is not None and not self.s.done():
            h.cancel(sid)
        elif self.cancel_at is None:
            h.close()


def rww_joiners(c):
    return harness.cache_stats(c.port).get("proxy.process.cistern.rww_joiners", -1)


def client_sockets(c):
    """The workers' fds of client connections (any of c's ports)."""
    inodes = set().union(*(harness.tcp_inodes(port, False) for port in c.ports))
    n = 0
    for pid in c.worker_pids():
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                n += os.readlink("/proc/%d/fd/%s" % (pid, fd)) in inodes
            except OSError:
                pass
    return n


def expect_no_client_sockets(c):
    harness.wait_for(lambda: client_sockets(c) == 0, 10,
                     what="no client socket left (now %d)" % client_sockets(c))


def expect_no_joiners(c):
    """Every join released (pins, the worker's join list): the gauge."""
    harness.wait_for(lambda: rww_joiners(c) == 0, 10, what="rww_joiners 0 (now %d)"
                     % rww_joiners(c))


@harness.timeout(120)
def test_h2_streams_and_http11_join_one_fill():
    """8 MiB at 1 MiB/s over two workers: ten HTTP/2 streams (h2c, and
    every fourth over TLS with ALPN h2), each on its own connection, and
    two HTTP/1.1 clients join at random times: one origin request, every
    body byte-exact, each stream ended (END_STREAM) and its first DATA
    within 100 ms of its request (max and p50 printed)."""
    test_h2.need_h2()
    n, rate = 8 * MiB, MiB
    with Origin() as o, test_h2.daemon(o, workers=2) as c:
        p = "/seed/rwwh2/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwh2", n)
        rnd = random.Random(22)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        streams = [H2Client(c, p, t0, at, tls=i % 4 == 3)
                   for i, at in enumerate(sorted(rnd.uniform(0.5, 6.5) for _ in range(10)))]
        h1 = [Client(c.port, p, t0, at, host=H2HOST) for at in (2.0, 4.5)]
        for x in [filler] + streams + h1:
            x.start()
        for x in [filler] + streams + h1:
            x.join(90)
        for i, x in enumerate([filler] + h1):
            expect(x.err is None, "HTTP/1.1 client %d: %s" % (i, x.err))
            expect_eq((x.got, x.sha), (n, want), "HTTP/1.1 client %d (%r) body length, SHA-256" % (i, x.hdrs.get("cache-status")))
        for i, x in enumerate(streams):
            what = "stream %d (at %.2f s%s)" % (i, x.at, ", TLS" if x.tls else "")
            expect(x.err is None, "%s: %s" % (what, x.err))
            expect_eq((x.s.status(), x.s.got, x.s.reset), (200, n, None), what)
            expect(x.s.ended, what + ": no END_STREAM")
            expect_eq(x.s.h.hexdigest(), want, what + " body SHA-256")
            expect("read-while-writer" in x.s.hdrs.get("cache-status", ""),
                   "%s did not join: %r" % (what, x.s.hdrs.get("cache-status")))
        for i, x in enumerate(h1):
            expect("read-while-writer" in x.hdrs.get("cache-status", ""), "HTTP/1.1 %d joined" % i)
        lat = sorted(x.s.first * 1000 for x in streams)
        print("  HTTP/2 joiners' first DATA: max %.1f ms, p50 %.1f ms (10 streams, 3 on TLS)"
              % (lat[-1], statistics.median(lat)))
        expect_eq(origin_count(o, p), 1, "origin requests")
        expect(lat[-1] < 100, "a stream waited %.1f ms for its first DATA" % lat[-1])
        expect_no_joiners(c)
        # every joiner logged with the status it answered (not 0)
        lines = [ln for ln in harness.access_lines(c, 13) if p in ln]
        expect_eq(sorted(re.search(r'" (\d+) ', ln).group(1) for ln in lines), ["200"] * 13,
                  "access log statuses")


@harness.timeout(90)
def test_h2_closed_window_beside_fast_stream():
    """8 MiB at 2 MiB/s, one connection with windows of 16 KiB: the
    client never opens stream 1's window, takes stream 3's; both joined
    the fill.  Stream 3 and an HTTP/1.1 joiner end with the fill (~4 s),
    byte-exact; stream 1 holds its 16 KiB; the object is stored; stream 1
    stays joined until its connection closes, then is released."""
    test_h2.need_h2()
    n, rate = 8 * MiB, 2 * MiB
    with Origin() as o, test_h2.daemon(o, workers=2) as c:
        p = "/seed/rwwh2win/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwh2win", n)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        filler.start()
        harness.wait_for(lambda: origin_count(o, p) == 1, 10, what="the fill")
        time.sleep(0.3)
        hc = H2Conn(c, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
        hc.run(lambda: False, timeout=0.2)
        s1 = hc.get(p, stalled=True)
        s3 = hc.get(p)
        h1 = Client(c.port, p, t0, time.monotonic() - t0 + 0.2, host=H2HOST)
        h1.start()
        expect(hc.run(lambda: hc.st[s3].done(), timeout=30), "stream 3 did not end")
        fast_end = time.monotonic() - t0
        filler.join(30)
        h1.join(30)
        for name, x in (("filler", filler), ("HTTP/1.1 joiner", h1)):
            expect(x.err is None, "%s: %s" % (name, x.err))
            expect_eq(x.sha, want, name + " body SHA-256")
        st1, st3 = hc.st[s1], hc.st[s3]
        expect_eq((st3.status(), st3.got, st3.ended), (200, n, True), "stream 3")
        expect_eq(st3.h.hexdigest(), want, "stream 3 body SHA-256")
        for name, st in (("stream 1", st1), ("stream 3", st3)):
            expect("read-while-writer" in st.hdrs.get("cache-status", ""), name + " joined")
        hc.run(lambda: False, timeout=0.5)
        expect_eq((st1.got, st1.done()), (16384, False), "stream 1: its window, no more")
        print("  filler ended at %.2f s, the fast stream at %.2f s, HTTP/1.1 joiner %.2f s"
              % (filler.end, fast_end, h1.end))
        expect(filler.end < n / rate + 1.5, "the fill was slowed: %.2f s" % filler.end)
        expect(fast_end < filler.end + 1.5, "the fast stream lagged the fill: %.2f s" % fast_end)
        expect(h1.end < filler.end + 1.5, "the HTTP/1.1 joiner lagged: %.2f s" % h1.end)
        r = harness.one_request(c.port, "GET", p, None, (), H2HOST, None, 30)
        expect(harness.is_hit(r), "stored (%r)" % (r and r.header("Cache-Status")))
        expect_eq(origin_count(o, p), 1, "origin requests")
        expect_eq(rww_joiners(c), 1, "stream 1 still joined")
        expect_eq(client_sockets(c), 1, "client sockets (the h2 connection's)")
        hc.close()
        expect_no_joiners(c)
        expect_no_client_sockets(c)


@harness.timeout(90)
def test_h2_origin_dies_stream_reset():
    """8 MiB at 2 MiB/s, the origin closing at 50%: an h2c stream and a
    TLS stream that joined are reset (INTERNAL_ERROR) short of their
    Content-Length, never ended; nothing is stored."""
    test_h2.need_h2()
    n, rate = 8 * MiB, 2 * MiB
    with Origin() as o, test_h2.daemon(o, workers=2) as c:
        p = "/seed/rwwh2die/stream/%d/rate/%d/die-at/50/%s" % (n, rate, LONG)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        streams = [H2Client(c, p, t0, 0.5), H2Client(c, p, t0, 1.0, tls=True)]
        for x in [filler] + streams:
            x.start()
        for x in [filler] + streams:
            x.join(60)
        expect(filler.got < n, "the filler's truncated body looked complete")
        for i, x in enumerate(streams):
            expect(x.err is None, "stream %d: %s" % (i, x.err))
            expect("read-while-writer" in x.s.hdrs.get("cache-status", ""), "stream %d joined" % i)
            expect_eq(x.s.hdrs.get("content-length"), str(n), "stream %d content-length" % i)
            expect(x.s.got < n and not x.s.ended, "stream %d: %d bytes, ended %r"
                   % (i, x.s.got, x.s.ended))
            expect_eq(x.s.reset, test_h2.INTERNAL_ERROR, "stream %d RST_STREAM code" % i)
        expect_eq(origin_count(o, p), 1, "origin requests")
        expect_no_joiners(c)
        r = harness.one_request(c.port, "GET", p, None, (), H2HOST, None, 30)
        expect(r is None or not is_hit(r), "the truncated object was stored")
        expect_eq(origin_count(o, p), 2, "origin requests after")


@harness.timeout(90)
def test_h2_joiner_reset_closed_goaway():
    """8 MiB at 1 MiB/s: one joining stream is reset by its client
    (CANCEL) after 1 MiB, and its connection then answers another request;
    another joiner's connection is closed after 1 MiB; a third stream,
    whose window the client never opens, is ended by our GOAWAY at
    no_activity_timeout_in (2 s).  Each join is released while the fill
    goes on; the fill completes (stored, one origin request)."""
    test_h2.need_h2()
    n, rate = 8 * MiB, MiB
    with Origin() as o, test_h2.daemon(o, workers=2, records={
            "proxy.config.http2.no_activity_timeout_in": 2}) as c:
        p = "/seed/rwwh2rst/stream/%d/rate/%d/%s" % (n, rate, LONG)
        # (the fill lasts 8 s: every join is released before it ends)
        small = "/seed/rwwh2small/bytes/1000/" + LONG
        want = seeded_sha("rwwh2rst", n)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        a = H2Client(c, p, t0, 0.5, cancel_at=MiB)
        b = H2Client(c, p, t0, 0.5, close_at=MiB)
        for x in (filler, a, b):
            x.start()
        harness.wait_for(lambda: origin_count(o, p) == 1, 10, what="the fill")
        time.sleep(0.5)
        g = H2Conn(c, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16384})
        sg = g.get(p, stalled=True)
        a.join(30)
        b.join(30)
        for name, x in (("cancelled", a), ("closed", b)):
            expect(x.err is None, "%s: %s" % (name, x.err))
            expect("read-while-writer" in x.s.hdrs.get("cache-status", ""), name + " joined")
            expect(MiB <= x.s.got < n, "%s stream: %d bytes" % (name, x.s.got))
        sa = a.conn.get(small)
        expect(a.conn.run(lambda: a.conn.st[sa].done(), timeout=10), "no answer after the reset")
        expect_eq((a.conn.st[sa].status(), a.conn.st[sa].got), (200, 1000),
                  "another stream on the connection of the cancelled one")
        expect(g.run(lambda: False, timeout=6) is False and g.closed, "no close at the idle timeout")
        expect("read-while-writer" in g.st[sg].hdrs.get("cache-status", ""), "the stalled one joined")
        expect_eq((g.goaway, g.st[sg].got, g.st[sg].ended), (0, 16384, False),
                  "GOAWAY(NO_ERROR) code, the stalled stream's bytes, ended")
        expect_no_joiners(c)
        expect(origin_count(o, p) == 1 and filler.end is None, "the fill ended early")
        filler.join(30)
        a.conn.close()
        expect_eq(filler.sha, want, "filler body SHA-256")
        r = harness.one_request(c.port, "GET", p, None, (), H2HOST, None, 30)
        expect(is_hit(r), "stored (%r)" % (r and r.header("Cache-Status")))
        expect_eq(origin_count(o, p), 1, "origin requests")
        expect_no_client_sockets(c)


@harness.timeout(60)
def test_h2_joiner_of_stalled_fill_not_idle():
    """The origin sends half of 4 MiB and stalls: a joining stream that has
    sent all that was written waits on the fill, not on its client, so
    no_activity_timeout_in (2 s) does not close its connection; the origin
    inactivity timeout (5 s) fails the fill and the stream is reset
    (INTERNAL_ERROR), never ended."""
    test_h2.need_h2()
    n = 4 * MiB
    with Origin() as o, test_h2.daemon(o, workers=1, records={
            "proxy.config.http2.no_activity_timeout_in": 2,
            "proxy.config.http.transaction_no_activity_timeout_out": 5}) as c:
        p = "/seed/rwwh2stall/stall/%d/%s" % (n, LONG)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        st = H2Client(c, p, t0, 0.5)
        for x in (filler, st):
            x.start()
        for x in (filler, st):
            x.join(30)
        expect(st.err is None, "stream: %s" % st.err)
        expect("read-while-writer" in st.s.hdrs.get("cache-status", ""), "joined")
        print("  the stream: %d bytes, reset %r at %.2f s, GOAWAY %r"
              % (st.s.got, st.s.reset, st.end, st.conn.goaway))
        expect_eq((st.conn.goaway, st.s.reset, st.s.ended), (None, test_h2.INTERNAL_ERROR, False),
                  "GOAWAY, RST_STREAM code, ended")
        expect(MiB <= st.s.got < n, "stream bytes: %d" % st.s.got)
        expect(st.end > 5, "reset at %.2f s, before the origin timeout" % st.end)
        expect_no_joiners(c)


@harness.timeout(90)
def test_lapped_fill_joiners_complete():
    """8 MiB at 2 MiB/s on a 64M store while 72 MiB of other fills lap the
    ring: the fill cannot be stored (its first extent left the ring), but
    every body byte arrived and its joiners hold their extents (pins), so
    an HTTP/1.1 joiner and an HTTP/2 stream get the whole body, byte-exact
    and ended, not a reset."""
    test_h2.need_h2()
    n, rate = 8 * MiB, 2 * MiB
    with Origin() as o, test_h2.daemon(o, workers=1) as c:
        p = "/seed/rwwlap/stream/%d/rate/%d/%s" % (n, rate, LONG)
        want = seeded_sha("rwwlap", n)
        t0 = time.monotonic()
        filler = Client(c.port, p, t0, 0.0, host=H2HOST)
        h1 = Client(c.port, p, t0, 0.3, host=H2HOST)
        st = H2Client(c, p, t0, 0.3)
        for x in (filler, h1, st):
            x.start()
        time.sleep(0.8)
        for i in range(36):
            r = harness.one_request(c.port, "GET", "/seed/lap%d/bytes/%d/%s" % (i, 2 * MiB, LONG),
                                    None, (), H2HOST, None, 30)
            expect(r is not None and r.status == 200, "lap fill %d" % i)
        lapped = time.monotonic() - t0
        for x in (filler, h1, st):
            x.join(60)
        print("  the ring lapped by %.2f s, the fill ended at %.2f s" % (lapped, filler.end))
        expect(lapped < filler.end, "the laps ended after the fill (%.2f s)" % lapped)
        expect_eq(filler.sha, want, "filler body SHA-256")
        expect("read-while-writer" in h1.hdrs.get("cache-status", ""), "HTTP/1.1 joined")
        expect_eq((h1.got, h1.sha), (n, want), "HTTP/1.1 joiner body length, SHA-256")
        expect(st.err is None, "stream: %s" % st.err)
        expect("read-while-writer" in st.s.hdrs.get("cache-status", ""), "stream joined")
        expect_eq((st.s.got, st.s.ended, st.s.reset), (n, True, None), "stream bytes, ended, reset")
        expect_eq(st.s.h.hexdigest(), want, "stream body SHA-256")
        r = harness.one_request(c.port, "GET", p, None, (), H2HOST, None, 30)
        expect(r is not None and not is_hit(r), "the lapped fill was stored")
        expect_no_joiners(c)


@harness.timeout(60)
def test_h2_slow_joiner_outlives_its_slot():
    """test_slow_joiner_outlives_its_slot with an HTTP/2 stream as the
    slow joiner (its window paces it at 1 MiB/s): byte-exact, ended,
    after its fill's slot went to another fill woken on the same worker;
    then released."""
    test_h2.need_h2()
    n = 16 * MiB
    with Origin() as o, test_h2.daemon(o, workers=1, storage=["cache 256M"]) as c:
        pa = "/seed/rwwh2a/stream/%d/rate/%d/%s" % (n, 8 * MiB, LONG)
        pb = "/seed/rwwh2b/stream/%d/rate/%d/%s" % (2 * MiB, 2 * MiB, LONG)
        t0 = time.monotonic()
        fa = Client(c.port, pa, t0, 0.0, host=H2HOST)
        slow = H2Client(c, pa, t0, 0.3, rate=MiB)
        fb = Client(c.port, pb, t0, 7.6, host=H2HOST)
        jb = Client(c.port, pb, t0, 7.9, host=H2HOST)
        for x in (fa, slow, fb, jb):
            x.start()
        for x in (fa, slow, fb, jb):
            x.join(60)
        expect(slow.err is None, "slow stream: %s" % slow.err)
        expect("read-while-writer" in slow.s.hdrs.get("cache-status", ""), "slow joined")
        expect("read-while-writer" in jb.hdrs.get("cache-status", ""), "B's joiner joined")
        expect_eq((slow.s.got, slow.s.ended), (n, True),
                  "slow stream body length, ended (at %.2f s)" % slow.end)
        expect(slow.end > 10, "the slow stream was not slow (%.2f s)" % slow.end)
        expect_eq(slow.s.h.hexdigest(), seeded_sha("rwwh2a", n), "slow stream body SHA-256")
        expect_eq(jb.sha, seeded_sha("rwwh2b", 2 * MiB), "B's joiner body SHA-256")
        expect_no_joiners(c)

if __name__ == "__main__":
    harness.main()
