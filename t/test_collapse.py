#!/usr/bin/env python3
"""t/test_collapse.py: collapsed forwarding across workers (issue 6).

N concurrent misses for one URL, whichever worker they land on, make one
origin fetch; the others wait on the fill table and are woken when it ends.
A fill whose response is uncacheable releases its waiters at once and turns
the URL into a hit-for-miss for a while; a fill whose worker dies releases
its waiters through the master.
"""
import os
import signal
import socket
import subprocess
import threading
import time

import harness
from harness import (Cistern, Origin, expect, expect_eq, parse_responses,
                     pattern, wait_for)

STORE = ["cache 64M"]


def remap_for(o):
    return ["map http://m.test/ http://%s/" % o.authority]


def fetch(port, path, timeout=20.0):
    """GET on a fresh connection; returns (status, headers dict, body,
    seconds) or (None, None, error, seconds) when the connection broke."""
    t0 = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(b"GET %s HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n"
                  % path.encode())
        data = b""
        while True:
            try:
                b = s.recv(65536)
            except OSError as e:
                return None, None, repr(e), time.time() - t0
            if not b:
                break
            data += b
    finally:
        s.close()
    try:
        r = parse_responses(data)[0]
    except Exception as e:                  # truncated: the worker died
        return None, None, repr(e), time.time() - t0
    return r.status, {k.lower(): v for k, v in r.headers}, r.body, time.time() - t0


def burst(port, path, n):
    out = [None] * n

    def one(i):
        out[i] = fetch(port, path)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def test_fifty_clients_one_origin_fetch():
    """50 concurrent clients, 2 workers, a slow origin: the origin sees one
    request, every client gets the whole body, the waiters say collapsed."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(o), workers=2,
                                records={"proxy.config.cistern.debug_headers": 1}) as c:
        path = "/delay/600/bytes/20000/headers?Cache-Control=max-age%3D300"
        res = burst(c.port, path, 50)
        bodies_ok = sum(1 for st, h, b, _ in res if st == 200 and b == pattern(20000))
        expect_eq(bodies_ok, 50, "clients with the full body")
        expect_eq(len(o.requests()), 1, "origin requests")
        collapsed = sum(1 for st, h, b, _ in res
                        if h and "collapsed" in h.get("cache-status", ""))
        expect(collapsed >= 40, "only %d answers say collapsed: %r"
               % (collapsed, [h.get("cache-status") for _, h, _, _ in res if h][:5]))
        workers = {h.get("x-cistern-worker", "").split(";")[0] for _, h, _, _ in res if h}
        expect_eq(len(workers), 2, "workers that answered (%r)" % workers)
        # and nobody waited for a timeout
        expect(max(t for _, _, _, t in res) < 5, "slowest client %.1f s"
               % max(t for _, _, _, t in res))


def test_uncacheable_releases_waiters_at_once():
    """A fill that turns out uncacheable releases its waiters at once: they
    fetch for themselves right away (not after the wait timeout), and the URL
    is then a hit-for-miss: later requests go straight to the origin."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(o), workers=2,
                                records={"proxy.config.cistern.collapse_timeout": 10}) as c:
        path = "/delay/500/bytes/100/headers?Cache-Control=no-store"
        t0 = time.time()
        res = burst(c.port, path, 10)
        took = time.time() - t0
        expect(all(st == 200 and b == pattern(100) for st, _, b, _ in res),
               "every client answered: %r" % [(st, len(b) if b else b) for st, _, b, _ in res])
        expect(took < 3, "the burst took %.1f s (waiters held to the timeout?)" % took)
        expect_eq(len(o.requests()), 10, "origin requests (one each)")
        # hit-for-miss: a second burst is not serialised behind a fill
        t0 = time.time()
        res = burst(c.port, path, 5)
        expect(time.time() - t0 < 1.5, "second burst %.1f s" % (time.time() - t0))
        expect_eq(len(o.requests()), 15, "origin requests after the second burst")


def test_large_object_releases_waiters():
    """Waiters on an object whose Content-Length says it is large (> 1 MiB)
    join the fill (read-while-writer, t/test_rww.py): one origin request,
    every client the whole body.  With enable_read_while_writer 0 they are
    released to fetch for themselves when the head arrives, rather than
    held until the whole body is stored."""
    n = 3 * 1024 * 1024
    path = "/delay/300/slow-body/%d/200/headers?Cache-Control=max-age%%3D300" % n
    for rww in (1, 0):
        with Origin() as o, Cistern(storage=["cache 256M"], remap=remap_for(o), workers=2,
                                    records={"proxy.config.cache.enable_read_while_writer":
                                             rww}) as c:
            res = burst(c.port, path, 4)
            expect(all(st == 200 and b == pattern(n) for st, _, b, _ in res),
                   "every client got the whole body (rww %d)" % rww)
            if rww:
                expect_eq(len(o.requests()), 1, "origin requests (joined)")
            else:
                expect(len(o.requests()) >= 2, "waiters were released to the origin "
                       "(origin saw %d requests)" % len(o.requests()))


def _filling_worker(c, origin_port):
    """The worker pid holding a connection to the origin (via ss)."""
    out = subprocess.run(["ss", "-tnpH", "state", "established",
                          "( dport = :%d )" % origin_port],
                         capture_output=True, text=True).stdout
    for pid in c.worker_pids():
        if "pid=%d," % pid in out:
            return pid
    return None


def test_filling_worker_killed_mid_fill():
    """kill -9 of the worker filling an object: no client gets a corrupted
    body (its own clients see a cut connection), the waiters in the other
    worker are released by the master and recover with the full object, and
    the object is then served whole."""
    if subprocess.run(["which", "ss"], capture_output=True).returncode != 0:
        raise harness.SkipTest("ss (iproute2) not installed")
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(o), workers=2,
                                records={"proxy.config.cistern.debug_headers": 1}) as c:
        c.expect_log(r"worker \d+ \(pid \d+, generation \d+\) killed by signal 9")
        n = 200000
        path = "/slow-body/%d/300/headers?Cache-Control=max-age%%3D300" % n
        res = [None] * 12

        def one(i):
            res[i] = fetch(c.port, path)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(12)]
        for t in ts:
            t.start()
        pid = wait_for(lambda: _filling_worker(c, o.port), 5, what="the filling worker")
        time.sleep(0.5)         # mid-body
        os.kill(pid, signal.SIGKILL)
        for t in ts:
            t.join()
        ok = [r for r in res if r[0] == 200]
        for st, h, b, _ in res:
            if st == 200:
                expect(b == pattern(n), "a complete-looking body is corrupt (len %d)" % len(b))
        expect(len(ok) >= 1, "nobody recovered: %r" % [(r[0], r[2][:60] if isinstance(r[2], str) else len(r[2])) for r in res])
        # the survivors' fetch stored the object whole
        st, h, b, _ = fetch(c.port, path)
        expect_eq(st, 200, "status after the kill")
        expect(b == pattern(n), "body after the kill")
        c.wait_log(r"worker \d+ respawned", 3)


if __name__ == "__main__":
    harness.main()
