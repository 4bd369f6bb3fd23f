#!/usr/bin/env python3
"""Regression tests for the smaller findings of issue 16 ("Trustworthy in
the field"), one test per finding, each failing before its fix:

- the store handed to the unprivileged user without being led out of it
  by a symlink or a hard link (root only, else skipped);
- workers (and the cache manager) gone within a second of a SIGKILL to
  the master, whatever they were doing, and the store intact after;
- a refused PUSH answered with its own reason, not another connection's.
"""

import ctypes
import os
import pwd
import re
import signal
import socket
import threading
import time

import harness
from harness import (Cistern, Conn, Origin, cache_stats, curl, expect,
                     expect_body, expect_eq, is_hit, wait_for)

AT_FDCWD = -100
RENAME_EXCHANGE = 2
PUSH_ON = {"proxy.config.http.push_method_enabled": 1}
BYTES_IN = "proxy.process.cistern.client_bytes_in"


# ---------------------------------------------------------------------------
# PUSH refusals: each connection's own reason

def _pushed_head(cc, length):
    return ("HTTP/1.1 200 OK\r\nCache-Control: %s\r\nContent-Length: %d\r\n"
            "\r\n" % (cc, length)).encode("latin-1")


def _push_head(path, body_len):
    return ("PUSH %s HTTP/1.1\r\nHost: p.test\r\nContent-Length: %d\r\n\r\n"
            % (path, body_len)).encode("latin-1")


def _read_waiter(port, nbytes):
    """A function for wait_for: true once the worker has read nbytes more
    request bytes than when _read_waiter was called (client_bytes_in; each
    /_stats request adds its own head, a constant measured first)."""
    v0 = cache_stats(port)[BYTES_IN]
    per_poll = cache_stats(port)[BYTES_IN] - v0
    polls = [1]

    def done():
        polls[0] += 1
        v = cache_stats(port)[BYTES_IN]
        return v - v0 - polls[0] * per_poll >= nbytes
    return done


def test_push_refusals_keep_their_own_reason():
    """Two PUSHes refused for different reasons, the first one's body still
    streaming when the second is refused: each gets its own reason.  The
    reason used to be built in one static buffer, so the first connection
    was answered with the second one's reason."""
    with Origin() as o, Cistern(
            storage=["cache 64M"], workers=1, records=PUSH_ON,
            remap=["map http://p.test/ http://%s/" % o.authority]) as c:
        for first_cc, second_cc in (("no-store", "private"),
                                    ("private", "no-store")):
            body = b"x" * 4000
            pushed_a = _pushed_head(first_cc, len(body)) + body
            a = Conn(c.port)
            try:
                # A: the pushed head (refused at once) and half the body
                sent = _push_head("/a-" + first_cc, len(pushed_a)) \
                    + pushed_a[:len(pushed_a) // 2]
                a_read = _read_waiter(c.port, len(sent))
                a.send(sent)
                wait_for(a_read, 10, what="the worker to read PUSH A's head")
                # B: refused for another reason, answered at once
                pushed_b = _pushed_head(second_cc, 10) + b"0123456789"
                b = Conn(c.port)
                try:
                    rb = b.request(_push_head("/b-" + second_cc, len(pushed_b))
                                   + pushed_b, method="PUSH")
                finally:
                    b.close()
                expect_eq(rb.status, 400, "PUSH B status")
                expect(("not storable: %s" % second_cc).encode() in rb.body,
                       "PUSH B (%s): body %r" % (second_cc, rb.body))
                # A ends: its answer must still name its own reason
                a.send(pushed_a[len(pushed_a) // 2:])
                ra = a.response(method="PUSH")
            finally:
                a.close()
            expect_eq(ra.status, 400, "PUSH A status")
            expect(("not storable: %s" % first_cc).encode() in ra.body,
                   "PUSH A (%s) got another connection's reason: %r"
                   % (first_cc, ra.body))


# ---------------------------------------------------------------------------
# The master killed: the rest follows at once

@harness.timeout(120)
def test_kill9_master_busy_workers_leave_within_a_second():
    """SIGKILL to the master while its workers are busy with every kind of
    work (a fill streaming in, a request waiting on a hanging origin, a
    collapsed waiter, a PUSH half sent, a half-sent request head, idle
    keep-alive connections): every child is gone within a second (EOF on
    the master pipe and PR_SET_PDEATHSIG), and the next start on the same
    store serves what was stored before, byte for byte."""
    with Origin() as o, Cistern(
            storage=["cache 64M"], workers=2,
            records=dict(PUSH_ON, **{
                "proxy.config.cistern.collapse_timeout": 30}),
            remap=["map http://p.test/ http://%s/" % o.authority]) as c:
        kept = "/seed/kept/bytes/70000/headers?Cache-Control=max-age%3D600"
        r0 = curl([c.url(kept), "-H", "Host: p.test"])
        expect_eq(r0.status, 200, "the object stored before the kill")
        socks = []

        def req(data):
            s = socket.create_connection(("127.0.0.1", c.port), 5)
            s.sendall(data)
            socks.append(s)
        try:
            for i in range(4):
                # a fill streaming in (stored when complete), its collapsed
                # twin, a hanging origin, a PUSH and a head half sent, idle
                slow = ("/seed/s%d/slow-body/200000/2000/headers?"
                        "Cache-Control=max-age%%3D600" % i).encode()
                req(b"GET " + slow + b" HTTP/1.1\r\nHost: p.test\r\n\r\n")
                req(b"GET " + slow + b" HTTP/1.1\r\nHost: p.test\r\n\r\n")
                req(b"GET /hang/%d HTTP/1.1\r\nHost: p.test\r\n\r\n" % i)
                pushed = _pushed_head("max-age=600", 100000) + b"p" * 5000
                req(_push_head("/pushed/%d" % i, len(pushed) + 95000)
                    + pushed)
                req(b"GET /half HTTP/1.1\r\nHo")
                req(b"")
            wait_for(lambda: len(o.requests()) >= 9, 10,
                     what="the origin to see the fills and the hanging "
                     "requests")
            family = harness.descendants_of(c.pid)
            expect(len(family) >= 3, "workers and manager: %s" % family)
            os.kill(c.pid, signal.SIGKILL)
            t0 = time.monotonic()
            gone = {}
            while len(gone) < len(family) and time.monotonic() - t0 < 10:
                for p in family:
                    if p not in gone and not harness._alive(p):
                        gone[p] = time.monotonic() - t0
                time.sleep(0.002)
            c.proc.wait(5)
            c.stopped = True
            c._close_files()
            left = [p for p in family if p not in gone]
            for p in left:
                os.kill(p, signal.SIGKILL)
            expect(not left, "still alive 10 s after the master's SIGKILL: "
                   "%s" % left)
            slowest = max(gone.values())
            expect(slowest < 1.0, "the last child left %.2f s after the "
                   "master's SIGKILL (each: %s)" % (slowest, sorted(
                       "%.3f" % t for t in gone.values())))
        finally:
            for s in socks:
                s.close()
        # The store after the crash: what was stored is served intact.
        c.start()
        r = curl([c.url(kept), "-H", "Host: p.test"])
        expect_eq(r.status, 200, "after the restart")
        expect(is_hit(r), "the object stored before the kill is no hit: "
               "Cache-Status %r" % r.header("Cache-Status"))
        expect_body(r.body, harness.seeded("kept", 70000), "body after the "
                    "restart")


# ---------------------------------------------------------------------------
# The store handed over by root: never a step outside it

_need_root_and_nobody = harness.need_root_and_nobody


class _Swapper(threading.Thread):
    """Exchange two names (a directory and a symlink) as fast as possible,
    atomically (renameat2 RENAME_EXCHANGE), as a process of the store's
    owner could while root walks the store."""

    def __init__(self, a, b):
        super().__init__(daemon=True)
        self.a, self.b = os.fsencode(a), os.fsencode(b)
        self.stop = threading.Event()
        self.swaps = 0
        libc = ctypes.CDLL(None, use_errno=True)
        self.renameat2 = libc.renameat2
        self.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p,
                                   ctypes.c_int, ctypes.c_char_p,
                                   ctypes.c_uint]

    def run(self):
        while not self.stop.is_set():
            for _ in range(1000):
                if self.renameat2(AT_FDCWD, self.a, AT_FDCWD, self.b,
                                  RENAME_EXCHANGE) == 0:
                    self.swaps += 1


@harness.timeout(300)
def test_store_chown_never_leaves_the_store():
    """Started as root with a user to drop to, the master gives the store
    directory to that user, and must never give anything outside it: not
    through a symlink in the store (to a file or to a directory), not
    through a hard link to an outside file, not through a directory that a
    process of the user swaps for a symlink while the master walks (the
    walk by path name followed it).  Everything outside stays root's; the
    store itself is the user's."""
    nobody = _need_root_and_nobody()
    c = Cistern(records={"proxy.config.admin.user_id": "nobody"},
                storage=["cache 64M"], workers=1, start=False)
    swapper = None
    try:
        os.chmod(c.tmpdir, 0o755)       # nobody must reach the store
        outside = os.path.join(c.tmpdir, "outside")
        os.mkdir(outside, 0o755)
        bait = {}
        for name in ("secret", "linked", "in-dir"):
            bait[name] = os.path.join(outside, name)
            with open(bait[name], "w") as f:
                f.write("root's\n")
        store = os.path.join(c.confdir, "cache")
        os.mkdir(store, 0o700)
        os.symlink(bait["secret"], os.path.join(store, "to-secret"))
        os.symlink(outside, os.path.join(store, "to-outside"))
        os.link(bait["linked"], os.path.join(store, "hard-link"))
        os.mkdir(os.path.join(store, "sub"))
        with open(os.path.join(store, "sub", "mine"), "w") as f:
            f.write("the store's\n")
        os.symlink(outside, os.path.join(store, "swap"))
        swapper = _Swapper(os.path.join(store, "sub"),
                           os.path.join(store, "swap"))
        swapper.start()
    except BaseException:
        c._abort()
        raise

    def outside_owners():
        return {p: (os.lstat(p).st_uid, os.lstat(p).st_gid)
                for p in [outside] + list(bait.values())}

    try:
        with c:
            for attempt in range(8):
                if attempt:
                    c.restart()
                changed = {p: o for p, o in outside_owners().items()
                           if o != (0, 0)}
                expect(not changed, "start %d (%d swaps so far) gave files "
                       "outside the store to nobody: %s"
                       % (attempt + 1, swapper.swaps, changed))
            expect(swapper.swaps > 1000, "the swapper hardly ran (%d swaps)"
                   % swapper.swaps)
            swapper.stop.set()
            swapper.join(10)
            # what the store holds by right is the user's
            for p in [store, os.path.join(store, "content")]:
                expect_eq(os.lstat(p).st_uid, nobody.pw_uid, "owner of %s" % p)
            log = c.error_log()
            for name, why in (("to-secret", "is a symbolic link"),
                              ("to-outside", "is a symbolic link"),
                              ("hard-link", "has other hard links")):
                expect(re.search(r"\[warn\] .*/%s %s.*: left alone"
                                 % (name, why), log),
                       "no warning for %s (%s)" % (name, why))
    finally:
        swapper.stop.set()
        swapper.join(10)

@harness.timeout(120)
def test_root_never_opens_through_a_planted_link():
    """Root never opens a file in a directory the user owns: the store
    check runs as the user (a symlink planted as the store's `content` made
    root truncate and grow its target), and the error log is reopened on
    SIGUSR1 without following a link the user put in its place."""
    _need_root_and_nobody()
    c = Cistern(records={"proxy.config.admin.user_id": "nobody"},
                storage=["cache 64M"], workers=1, start=False)
    try:
        os.chmod(c.tmpdir, 0o755)
        victim = os.path.join(c.tmpdir, "victim")
        with open(victim, "w") as f:
            f.write("root's own file\n")
        store = os.path.join(c.confdir, "cache")
        os.mkdir(store, 0o700)
        os.chown(store, pwd.getpwnam("nobody").pw_uid, -1)
        os.symlink(victim, os.path.join(store, "content"))
    except BaseException:
        c._abort()
        raise
    with c:
        c.start()
        c.expect_log(r"cache disabled|content")
        c.expect_log(r"reopening the error log")
        expect_eq(open(victim).read(), "root's own file\n", "the store's link target")
        victim2 = os.path.join(c.tmpdir, "victim2")
        with open(victim2, "w") as f:
            f.write("root's log target\n")
        log = os.path.join(c.log_dir, "error.log")
        os.rename(log, log + ".1")
        os.symlink(victim2, log)
        c.signal(signal.SIGUSR1)
        time.sleep(1.5)
        os.kill(c.pid, signal.SIGUSR1)
        time.sleep(0.5)
        expect_eq(open(victim2).read(), "root's log target\n",
                  "root wrote its log through a planted symlink")
        os.unlink(log)
        os.rename(log + ".1", log)


if __name__ == "__main__":
    harness.main()
