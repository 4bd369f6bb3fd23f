#!/usr/bin/env python3
"""The condition matrix (issue 16, "Trustworthy in the field").

Every phase of a transaction (the PROXY protocol header on a `pp` port,
request head, request body, waiting for the origin, response head,
response body on a miss, body of a hit, PUSH body, a CONNECT or Upgrade
tunnel) meets every adversity that applies to it (a client that reads at
1 KiB/s, half-closes, resets or goes silent; an origin that trickles, goes
silent past its timeout, closes early, resets, sends a malformed head or
sends more than it announced).  Each cell is one function below;
t/README.md has the table of expected outcomes (`python3 t/test_matrix.py
--table` prints it from the cells themselves).

The cells run concurrently, in threads, against ONE daemon (one worker, so
the fd accounting is exact), each on its own URLs.  Every cell asserts its
own outcome and then a follow-up plain GET of its URL: a clean hit or a
clean miss with the byte-exact body (the origin's `once` directive makes
the follow-up get the plain response; `seed/S` makes every cell's body
different).  After all cells: the worker is the same process (none died),
its open fd count is back at the baseline (leaked sockets are named with
the cell that opened them when it can be told), and the harness teardown
finds no [error]/[crit] line and no sanitizer report.

When cells fail in the concurrent run, each failing cell is run again
ALONE on a fresh daemon (a crash in one cell fails every cell in flight),
and both results are reported: the isolated one is the reproduction.

The PROXY cells (P0) use the daemon's second port, `0:pp`; the tunnel
cells (P8) CONNECT to a raw TCP target of their own on 127.0.0.1
(connect_ports "*", remap_required 0: every other cell names m.test, which
is remapped, so the forward proxy changes nothing for them), and P8.A7b
upgrades to a WebSocket origin behind the remap rule of ws.test.  A
tunnel's sockets to its target count as the cell's in the fd accounting.

The HTTP/2 cells (P16) speak h2c with prior knowledge on the daemon's third
port, `0:proto=http;http2`, with hand-built frames (test_h2's Raw).

The long and slow transfers of the issue (a 20 MiB hit and a 20 MiB miss to
a reader limited to 1 MiB/s, a 20 s origin) are cells L1-L3 of the same run.

Run some cells only:  MATRIX_CELLS='P5\\.A8|P3' python3 -B t/test_matrix.py
"""

import concurrent.futures
import hashlib
import os
import re
import socket
import sys
import threading
import time
import traceback

import harness
import test_h2 as h2t           # its raw HTTP/2 client and frames (P16)
import test_tunnel as tun       # its Server (raw TCP targets) and WebSocket
#                                 frames
from test_faults import serving_workers
from harness import (Cistern, Origin, TestFailure, expect, expect_body,
                     expect_eq, fail, is_hit, seeded)

HOST = "m.test"
# P14: a rule with two plugins (headers.so edits a hit's head as it goes
# out, cachekey.so drops utm= from the key); P15: generator.so, a plugin
# that is the origin (an intercept)
PHOST = "plug.test"
GHOST = "gen.test"
PLUG_OPTS = ("@plugin=headers.so @pparam=set-resp:X-Plug:edge "
             "@pparam=rm-resp:X-Origin-Conn "
             "@plugin=cachekey.so @pparam=--exclude-params=utm")
# Short inactivity timeouts, distinct so that a cut can be told apart.
T_IN = 2          # transaction_no_activity_timeout_in
T_OUT = 4         # transaction_no_activity_timeout_out
T_HEAD = 3        # request_header_timeout
T_KA_IN = 2       # keep_alive_no_activity_timeout_in
T_KA_OUT = 1      # keep_alive_no_activity_timeout_out: pooled origin
#                   connections go quickly, so the fd count settles
EARLY = 0.3       # a timer may fire this much early (granularity)
LATE = 12.0       # ...and this much late (ASan on a loaded 2-core box)
RECORDS = {
    "proxy.config.http.transaction_no_activity_timeout_in": T_IN,
    "proxy.config.http.transaction_no_activity_timeout_out": T_OUT,
    "proxy.config.cistern.request_header_timeout": T_HEAD,
    "proxy.config.http.keep_alive_no_activity_timeout_in": T_KA_IN,
    "proxy.config.http.keep_alive_no_activity_timeout_out": T_KA_OUT,
    "proxy.config.http.push_method_enabled": 1,
    "proxy.config.cache.max_doc_size": ("INT", "64M"),
    # P0: a second port that takes the PROXY protocol (c.ports[1]); P16: a
    # third, h2c with prior knowledge beside HTTP/1.1 (c.ports[2])
    "proxy.config.http.server_ports": "0 0:pp 0:proto=http;http2",
    "proxy.config.http.proxy_protocol_allowlist": "127.0.0.1",
    # P8: CONNECT to any port.  remap_required 0 makes the daemon a forward
    # proxy too; every other cell's request names m.test, which the remap
    # rule maps, so nothing else changes.
    "proxy.config.http.connect_ports": "*",
    "proxy.config.url_remap.remap_required": 0,
    # P12: Range misses fetch aligned 1 MiB slices (no other cell sends a
    # Range)
    "proxy.config.cistern.slice.blockbytes": 1 << 20,
    # P14, P15: the build's plugins
    "proxy.config.plugin.plugin_dir": os.path.join(
        os.path.dirname(harness.cistern_bin()), "plugins"),
}
# 127.0.0.1 (every client) may do everything, PUSH included; the PROXY
# addresses of P0 are allowed; CONNECT and the WebSocket origin reach
# 127.0.0.1 only with a destination rule (a forward proxy refuses the
# machine itself otherwise).
IP_ALLOW = ["src_ip=127.0.0.1 action=ip_allow method=ALL",
            "src_ip=203.0.113.0/24 action=ip_allow method=ALL",
            "dest_ip=127.0.0.1 action=ip_allow method=ALL"]
# 20 MiB objects must fit in one segment: a 640 MiB store gets 64 MiB
# segments (cache/FORMAT.md: seg_size halves from 64 MiB until there are
# at least 8), and room for the whole run's objects (about 350 MiB with
# issue 21's 4-8 MiB fills), so that no preloaded object is evicted
# before its cell's follow-up.
STORAGE = ["cache 640M"]
CC = "headers?Cache-Control=max-age%3D600"
SLOW = 1024                 # the slow reader / sender: 1 KiB/s
BIG = 8 << 20               # more than the socket buffers hold
HUGE = 20 << 20             # the long transfers

PHASES = [
    ("P0", "PROXY header (pp port)"),
    ("P1", "request head"),
    ("P2", "request body"),
    ("P3", "waiting for the origin"),
    ("P4", "response head"),
    ("P5", "response body on a miss"),
    ("P6", "body of a hit"),
    ("P7", "PUSH body"),
    ("P8", "tunnel (CONNECT)"),
    ("P9", "read-while-writer joiner: joined before the first byte"),
    ("P10", "read-while-writer joiner: joined mid-body"),
    ("P11", "read-while-writer joiner: joined near the end"),
    ("P12", "slice fetch (slice.blockbytes)"),
    ("P13", "background fill"),
    ("P14", "a plugged rule's hit (headers.so, cachekey.so)"),
    ("P15", "a plugin's answer (generator.so's intercept)"),
    ("P16", "an HTTP/2 stream waiting on its origin (h2c)"),
]
ADVERSITIES = [
    ("A1", "client reads at 1 KiB/s"),
    ("A2", "client half-closes"),
    ("A3", "client resets"),
    ("A4", "client goes silent"),
    ("A5", "origin trickles"),
    ("A6", "origin goes silent past its timeout"),
    ("A7", "origin closes early"),
    ("A8", "origin resets"),
    ("A9", "origin sends a malformed head"),
    ("A10", "origin sends more than it announced"),
    ("A11", "a reload"),
    ("A12", "kill -9 of the filling worker"),
    ("A13", "origin answers a slice with 200, not 206"),
    ("A14", "a slice unlike the first (ETag, length)"),
]
# The adversities that apply to a phase: A11-A14 are issue 21's, for its
# phases only (a reload and a kill -9 under P0-P8 are test_lifecycle's).
_A10 = ["A%d" % i for i in range(1, 11)]
ADVS_OF = dict([(p, _A10) for p in ("P0", "P1", "P2", "P3", "P4", "P5",
                                    "P6", "P7", "P8")]
               + [("P14", _A10)]
               + [(p, _A10 + ["A11", "A12"]) for p in ("P9", "P10", "P11",
                                                       "P13", "P15", "P16")]
               + [("P12", _A10 + ["A11", "A12", "A13", "A14"])])

CELLS = []        # (cid, phase, adversity, expected, fn, preload)
NA = {}           # (phase, adversity) -> reason


def cell(cid, expected, preload=None, solo=False):
    """Register a cell: cid is "P5.A8" or "P5.A8b"; preload names what
    must be in the cache before the cells start (see _preload); solo: the
    cell runs alone on a daemon of its own (two workers), after the
    concurrent run (a reload or a kill -9 changes the workers)."""
    def deco(fn):
        fn.solo = solo
        CELLS.append((cid, expected, fn, preload))
        return fn
    return deco


def na(phase, advs, reason):
    for a in advs:
        NA[(phase, a)] = reason


# ---------------------------------------------------------------------------
# A client connection that can misbehave

class Outcome:
    """What a client got: kind is "complete" (a response framed by
    Content-Length or chunked, whole), "close-delimited" (no framing, ended
    by the close: looks complete), "cut" (bytes, then the close before the
    response was whole), "none" (closed with no byte) or "open" (nothing
    more within the time limit)."""

    def __init__(self, kind, resp=None, extra=b"", raw=b"", reset=False):
        self.kind, self.resp, self.extra, self.raw = kind, resp, extra, raw
        self.reset = reset
        self.status = resp.status if resp is not None else \
            harness.status_of(bytes(raw[:40]))
        self.closed_at = None

    def __repr__(self):
        return "<%s status=%s %d bytes%s%s>" % (
            self.kind, self.status, len(self.raw),
            " reset" if self.reset else "",
            " extra=%r" % bytes(self.extra[:60]) if self.extra else "")


def _parse_head(buf):
    """(Response with headers, body start) or None when the head is not
    all there."""
    he = buf.find(b"\r\n\r\n")
    if he < 0:
        return None
    lines = bytes(buf[:he]).decode("latin-1").split("\r\n")
    m = re.match(r"^(HTTP/\d\.\d) (\d{3})(?: (.*))?$", lines[0])
    if not m:
        fail("bad status line from the proxy: %r" % lines[0])
    r = harness.Response()
    r.version, r.status, r.reason = m.group(1), int(m.group(2)), \
        m.group(3) or ""
    for ln in lines[1:]:
        if ":" not in ln:
            fail("bad header line from the proxy: %r" % ln)
        k, v = ln.split(":", 1)
        r.headers.append((k, v.strip(" \t")))
    return r, he + 4


class Client:
    def __init__(self, ctx, rcvbuf=None, timeout=30.0, port=None):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port or ctx.port))
        self.t_conn = time.monotonic()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = s
        self.lport = s.getsockname()[1]
        ctx.lports.append(self.lport)
        self.buf = bytearray()
        self.eof = self.reset = False
        self.eof_at = None
        self.t_sent = time.monotonic()     # last byte sent

    def send(self, data):
        self.sock.sendall(data)
        self.t_sent = time.monotonic()

    def send_slowly(self, data, bps=SLOW, tick=0.25):
        step = max(1, int(bps * tick))
        for i in range(0, len(data), step):
            if i:
                time.sleep(tick)
            self.send(data[i:i + step])

    def half_close(self):
        self.sock.shutdown(socket.SHUT_WR)

    def rst(self):
        """Close with a RST (SO_LINGER 0)."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def recv_some(self, timeout, n=1 << 20):
        """Returns bytes; None at EOF/reset; b"" on timeout."""
        if self.eof:
            return None
        self.sock.settimeout(max(timeout, 0.001))
        try:
            d = self.sock.recv(n)
        except socket.timeout:
            return b""
        except ConnectionResetError:
            self.eof = self.reset = True
            self.eof_at = time.monotonic()
            return None
        if not d:
            self.eof = True
            self.eof_at = time.monotonic()
            return None
        self.buf += d
        return d

    def outcome(self, method="GET"):
        """Classify what the buffer holds now (see Outcome)."""
        buf = self.buf
        if not buf:
            return Outcome("none" if self.eof else "open", reset=self.reset)
        ph = _parse_head(buf)
        if ph is None:
            return Outcome("cut" if self.eof else "open", raw=buf,
                           reset=self.reset)
        r, bstart = ph
        te = r.header("Transfer-Encoding")
        cl = r.header("Content-Length")
        bodyless = method == "HEAD" or r.status in (204, 304) or \
            100 <= r.status < 200
        end = None
        if bodyless:
            end = bstart
        elif te is not None and "chunked" in te.lower():
            r.chunked = True
            e, body, _, err = harness._dechunk(bytes(buf), bstart)
            if err:
                fail("bad chunked framing from the proxy: %s" % err)
            if e is not None:
                end, r.body = e, body
        elif cl is not None:
            n = int(cl)
            if len(buf) - bstart >= n:
                end = bstart + n
                r.body = bytes(buf[bstart:end])
        elif self.eof:
            r.body = bytes(buf[bstart:])
            return Outcome("close-delimited", r, raw=buf, reset=self.reset)
        if end is None:
            return Outcome("cut" if self.eof else "open", raw=buf,
                           reset=self.reset)
        return Outcome("complete", r, extra=buf[end:], raw=buf,
                       reset=self.reset)

    def read_response(self, timeout=30.0, rate=None, method="GET"):
        """Read until a complete response, the close, or timeout seconds
        without one.  rate: read at most that many bytes per second."""
        deadline = time.monotonic() + timeout
        tick = 0.25
        while True:
            o = self.outcome(method)
            if o.kind != "open":
                o.closed_at = self.eof_at
                return o
            left = deadline - time.monotonic()
            if left <= 0:
                return o
            if rate:
                t0 = time.monotonic()
                self.recv_some(min(left, 5.0), max(1, int(rate * tick)))
                rest = tick - (time.monotonic() - t0)
                if rest > 0 and not self.eof:
                    time.sleep(rest)
            else:
                self.recv_some(min(left, 1.0))

    def read_until_close(self, timeout=30.0):
        """Read until EOF; True if it came within timeout seconds."""
        deadline = time.monotonic() + timeout
        while not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.recv_some(left)
        return True


# ---------------------------------------------------------------------------
# What every cell shares

class Ctx:
    def __init__(self, cid, c, origin, ws_port):
        self.cid, self.port, self.origin = cid, c.port, origin
        self.cistern = c                # (the solo cells' own daemon)
        self.pp_port = c.ports[1]       # the `0:pp` listener
        self.h2_port = c.ports[2]       # h2c with prior knowledge (P16)
        self.log_dir = c.log_dir
        self.ws_port = ws_port          # the WebSocket origin of P8
        self.lports = []
        self.servers = []               # P8's targets, closed after the cell
        self.tag = cid.replace(".", "-")

    def client(self, **kw):
        return Client(self, **kw)

    def path(self, directives, cacheable=True, tag=None):
        """A URL for this cell: its own name, `once` (faults only on the
        first request), its own seed, then directives."""
        tag = tag or self.tag
        p = "/%s/once/seed/%s/%s" % (tag, tag, directives.strip("/"))
        return p + ("/" + CC if cacheable else "")

    def body(self, n, tag=None):
        return seeded(tag or self.tag, n)


def get_req(path, extra="", host=HOST):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (path, host, extra)
            ).encode("latin-1")


def followup(ctx, path, want, stored, host=HOST):
    """The follow-up plain GET: 200 with the byte-exact body; stored is
    "yes" (must be a hit), "no" (must be a miss) or "either"."""
    r = harness.one_request(ctx.port, "GET", path, host=host, timeout=60)
    expect(r is not None, "follow-up GET %s: no complete response" % path)
    expect_eq(r.status, 200, "follow-up GET status")
    expect_body(r.body, want, "follow-up GET body")
    if stored == "yes":
        expect(is_hit(r), "follow-up GET was not a hit (Cache-Status %r): "
               "the object was not stored" % r.header("Cache-Status"))
    elif stored == "no":
        expect(not is_hit(r), "follow-up GET was a hit: a failed transfer "
               "was stored")
    return r


def origin_conn_of(ctx, path):
    """The origin connection id of the first request for path."""
    for rec in ctx.origin.requests():
        if rec["target"] == path:
            return rec["conn"]
    fail("the origin never saw %s" % path)


def probe_not_reused(ctx, bad_conn):
    """A fresh URL right after a broken exchange: must not ride on the
    broken origin connection (it would read the left-over bytes)."""
    p = "/%s-probe/seed/%s-probe/bytes/1000" % (ctx.tag, ctx.tag)
    r = harness.one_request(ctx.port, "GET", p, host=HOST, timeout=30)
    expect(r is not None and r.status == 200, "probe after the broken "
           "exchange: %r" % r)
    expect_body(r.body, seeded(ctx.tag + "-probe", 1000), "probe body")
    expect(r.header("X-Origin-Conn") != str(bad_conn),
           "the origin connection of the broken exchange (%s) was reused"
           % bad_conn)


def expect_complete(o, want, what="response"):
    expect_eq(o.kind, "complete", "%s: %r" % (what, o))
    expect_eq(o.resp.status, 200, "%s status" % what)
    expect_body(o.resp.body, want, "%s body" % what)


def expect_cut(o, what="response"):
    """A transfer that failed after the head went out: never complete."""
    expect(o.kind in ("cut", "none"), "%s must be cut short (no complete "
           "response, no close-delimited one), got %r" % (what, o))


def expect_status_or_close(o, statuses, what):
    """Either one of statuses, or a close with no byte."""
    if o.kind == "none":
        return
    expect(o.kind == "complete" and o.status in statuses,
           "%s: want %s or a plain close, got %r" % (
               what, "/".join(map(str, statuses)), o))


def expect_gateway_error(ctx, o, path, status, want):
    """502/504 before any byte.  A 200 is fine only when it came from a
    retry: the origin saw the path twice (a pooled connection that failed
    is retried once on a fresh one) and the body is right."""
    if o.kind == "complete" and o.status == 200:
        n = sum(1 for rec in ctx.origin.requests() if rec["target"] == path)
        expect(n >= 2, "200 after an origin failure, without a retry: %r"
               % o)
        expect_body(o.resp.body, want, "retried body")
        return
    expect(o.kind == "complete" and o.status == status,
           "want a %d, got %r" % (status, o))


def expect_elapsed(t, lo, hi, what):
    expect(t >= lo - EARLY, "%s after %.2fs: earlier than the %ds timeout"
           % (what, t, lo))
    expect(t <= hi + LATE, "%s after %.2fs: want about %ds" % (what, t, hi))


def expect_prompt(c, what):
    """A half-close mid-request is known at once: the answer must not wait
    for a timer."""
    t = c.eof_at - c.t_sent
    expect(t < min(T_IN, T_HEAD) - EARLY, "%s: closed after %.2fs, i.e. "
           "by a timer, not on the half-close" % (what, t))


def expect_origin_never_saw(ctx, path, full=None):
    """No request for path reached the origin (with full: none with a
    whole body of that length)."""
    for rec in ctx.origin.requests():
        if rec["target"] == path and (full is None
                                      or rec["body_len"] == full):
            fail("the origin got the request %s (body %d bytes)"
                 % (path, rec["body_len"]))


# ---------------------------------------------------------------------------
# P0: the PROXY protocol header (the `0:pp` port): before the request head
# comes the balancer's header saying who the client is.  Its deadline is
# min(accept_no_activity_timeout, request_header_timeout) from accept (here
# request_header_timeout: accept_no_activity_timeout is ATS's 120 s), and
# a byte does not restart it.  A header that is not whole closes the
# connection with no byte sent and no access log line.

PP_SRC = "203.0.113."       # the carried clients (TEST-NET-3): ip_allow
#                             allows them; one address per cell
ALOG_FLUSH = 2.5            # the workers flush the access log once a
#                             second (and the box is busy)

na("P0", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "the origin is not contacted before the PROXY header and the request "
   "head are whole (a whole header then goes on as P1-P7)")


def pp_v1(src):
    return ("PROXY TCP4 %s 127.0.0.1 40000 80\r\n" % src).encode()


def access_log(ctx):
    try:
        with open(os.path.join(ctx.log_dir, "access.log")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def expect_pp_nothing(ctx, c, src, path):
    """A PROXY header that was not whole: no byte to the client, nothing
    at the origin, no access log line (neither the carried address nor
    the path)."""
    expect_eq(bytes(c.buf), b"", "bytes sent to a client whose PROXY "
              "header was not whole")
    time.sleep(ALOG_FLUSH)
    expect_origin_never_saw(ctx, path)
    for ln in access_log(ctx):
        f = ln.split()
        if (f and f[0] == src) or (" %s " % path) in ln:
            fail("an access log line for a connection whose PROXY header "
                 "was not whole: %r" % ln)


@cell("P0.A1", "the client SENDS the PROXY header (then a GET) at 1 "
      "byte/s -> closed with no byte at the header deadline "
      "(request_header_timeout from accept: no byte restarts it), not "
      "earlier; no request served, nothing in the access log")
def p0_a1(ctx):
    src = PP_SRC + "1"
    p = ctx.path("bytes/3000")
    data = pp_v1(src) + get_req(p)
    c = ctx.client(port=ctx.pp_port)
    stop = c.t_conn + T_HEAD + LATE + 5
    for i in range(len(data)):
        if time.monotonic() > stop:
            break
        try:
            c.send(data[i:i + 1])
        except OSError:
            break           # closed: the read below says when
        c.recv_some(1.0)    # one byte a second, or the close
        if c.eof:
            break
    if not c.eof:
        c.read_until_close(2)
    expect(c.eof, "a PROXY header dripped at 1 byte/s was never cut (%.0f s)"
           % (time.monotonic() - c.t_conn))
    expect_elapsed(c.eof_at - c.t_conn, T_HEAD, T_HEAD, "dripped PROXY "
                   "header cut")
    c.close()
    expect_pp_nothing(ctx, c, src, p)
    followup(ctx, p, ctx.body(3000), "no")


@cell("P0.A2", "half-close mid-PROXY-header -> closed with no byte, at "
      "once; nothing in the access log")
def p0_a2(ctx):
    src = PP_SRC + "2"
    c = ctx.client(port=ctx.pp_port)
    c.send(pp_v1(src)[:20])
    c.half_close()
    expect(c.read_until_close(T_HEAD + LATE), "open after a half-closed "
           "PROXY header")
    expect_prompt(c, "half-closed PROXY header")
    c.close()
    expect_pp_nothing(ctx, c, src, ctx.path("bytes/3000"))


@cell("P0.A3", "reset mid-PROXY-header -> dropped; nothing in the access "
      "log")
def p0_a3(ctx):
    src = PP_SRC + "3"
    c = ctx.client(port=ctx.pp_port)
    c.send(pp_v1(src)[:20])
    time.sleep(0.3)
    c.rst()
    expect_pp_nothing(ctx, c, src, ctx.path("bytes/3000"))


@cell("P0.A4", "silent mid-PROXY-header -> closed with no byte at the "
      "header deadline (request_header_timeout from accept), not earlier; "
      "nothing in the access log")
def p0_a4(ctx):
    src = PP_SRC + "4"
    c = ctx.client(port=ctx.pp_port)
    c.send(pp_v1(src)[:20])
    expect(c.read_until_close(T_HEAD + LATE + 5), "open after a silent "
           "PROXY header")
    expect_elapsed(c.eof_at - c.t_conn, T_HEAD, T_HEAD, "silent PROXY "
                   "header closed")
    c.close()
    expect_pp_nothing(ctx, c, src, ctx.path("bytes/3000"))


@cell("P0.ok", "a whole v1 header, then a GET -> 200, byte-exact; the "
      "carried address is the client (X-Forwarded-For at the origin, the "
      "access log); stored")
def p0_ok(ctx):
    src = PP_SRC + "10"
    p = ctx.path("bytes/3000")
    c = ctx.client(port=ctx.pp_port)
    c.send(pp_v1(src) + get_req(p))
    expect_complete(c.read_response(T_OUT + LATE), ctx.body(3000))
    c.close()
    recs = [r for r in ctx.origin.requests() if r["target"] == p]
    expect(recs, "the origin never saw %s" % p)
    xff = [v for k, v in recs[0]["headers"] if k.lower() == "x-forwarded-for"]
    expect(xff, "no X-Forwarded-For at the origin")
    expect_eq(xff[-1].split(",")[-1].strip(), src, "X-Forwarded-For at the "
              "origin")

    def logged():
        return [ln for ln in access_log(ctx) if (" %s " % p) in ln] or None
    lines = harness.wait_for(logged, ALOG_FLUSH + LATE, what="the access "
                             "log line of %s" % p)
    expect_eq(lines[0].split()[0], src, "client in the access log (%r)"
              % lines[0])
    followup(ctx, p, ctx.body(3000), "yes")


# ---------------------------------------------------------------------------
# P1: the request head

HEAD_PART = "X-Part: of a head that never ends"

na("P1", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "the origin is not contacted before the request head is complete")


@cell("P1.A1", "the client SENDS its head at 1 KiB/s (2 KiB, 2 s: past "
      "transaction_no_activity_timeout_in, within request_header_timeout) "
      "-> 200, byte-exact")
def p1_a1(ctx):
    p = ctx.path("bytes/3000")
    c = ctx.client()
    head = get_req(p, "X-Pad: %s\r\n" % ("p" * 1900))
    c.send_slowly(head)
    expect_complete(c.read_response(), ctx.body(3000))
    c.close()
    followup(ctx, p, ctx.body(3000), "yes")


@cell("P1.A2", "half-close mid-head -> 400 or a plain close, at once; "
      "nothing reaches the origin")
def p1_a2(ctx):
    p = ctx.path("bytes/3000")
    c = ctx.client()
    c.send(get_req(p)[:-2] + (HEAD_PART + "\r\n").encode())
    c.half_close()
    o = c.read_response(T_HEAD + LATE)
    expect_status_or_close(o, (400,), "half-closed head")
    expect(c.eof, "connection still open after a half-closed head")
    expect_prompt(c, "half-closed head")
    c.close()
    expect_origin_never_saw(ctx, p)
    followup(ctx, p, ctx.body(3000), "no")


@cell("P1.A3", "reset mid-head -> dropped; nothing reaches the origin")
def p1_a3(ctx):
    p = ctx.path("bytes/3000")
    c = ctx.client()
    c.send(get_req(p)[:-2] + (HEAD_PART + "\r\n").encode())
    time.sleep(0.3)
    c.rst()
    time.sleep(0.5)
    expect_origin_never_saw(ctx, p)
    followup(ctx, p, ctx.body(3000), "no")


@cell("P1.A4", "silent mid-head -> 408 and close after "
      "min(transaction_no_activity_timeout_in, request_header_timeout), "
      "not earlier; nothing reaches the origin")
def p1_a4(ctx):
    p = ctx.path("bytes/3000")
    c = ctx.client()
    c.send(get_req(p)[:-2] + (HEAD_PART + "\r\n").encode())
    o = c.read_response(T_HEAD + LATE + 5)
    expect(c.read_until_close(5), "no close after the 408: %r" % o)
    expect_eq(o.status, 408, "answer to a silent head (%r)" % o)
    expect_elapsed(c.eof_at - c.t_sent, min(T_IN, T_HEAD),
                   min(T_IN, T_HEAD), "silent head closed")
    c.close()
    expect_origin_never_saw(ctx, p)
    followup(ctx, p, ctx.body(3000), "no")


# ---------------------------------------------------------------------------
# P2: the request body (a POST, streamed to the origin)

def post_head(path, n):
    return ("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
            % (path, HOST, n)).encode("latin-1")


def origin_body_ok(ctx, path, body):
    for rec in ctx.origin.requests():
        if rec["target"] == path:
            expect_eq(rec["body_len"], len(body), "body length at the "
                      "origin")
            expect_eq(rec["body_sha256"], hashlib.sha256(body).hexdigest(),
                      "body SHA-256 at the origin")
            return
    fail("the origin never got %s" % path)


na("P2", ["A9", "A10"], "the origin answers after the request body: its "
   "response head and body are rows P4 and P5")


@cell("P2.A1", "the client SENDS a 6 KiB body at 1 KiB/s (6 s: past both "
      "transaction timeouts) -> never cut; 200; the origin gets the body "
      "byte-exact")
def p2_a1(ctx):
    p = ctx.path("sink/bytes/100", cacheable=False)
    body = seeded(ctx.tag + "-req", 6144)
    c = ctx.client()
    c.send(post_head(p, len(body)))
    c.send_slowly(body)
    expect_complete(c.read_response(T_OUT + LATE), ctx.body(100))
    c.close()
    origin_body_ok(ctx, p, body)
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A2", "half-close mid-body -> 400 or a plain close, never a 2xx; "
      "the origin never gets a whole request")
def p2_a2(ctx):
    p = ctx.path("sink/bytes/100", cacheable=False)
    c = ctx.client()
    c.send(post_head(p, 20000) + b"b" * 3000)
    c.half_close()
    o = c.read_response(T_IN + T_OUT + LATE)
    expect_status_or_close(o, (400,), "half-closed body")
    expect(c.read_until_close(5), "connection open after a half-closed "
           "body")
    expect_prompt(c, "half-closed body")
    c.close()
    expect_origin_never_saw(ctx, p, 20000)
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A3", "reset mid-body -> dropped; the origin connection closed "
      "(the origin never gets a whole request)")
def p2_a3(ctx):
    p = ctx.path("sink/bytes/100", cacheable=False)
    c = ctx.client()
    c.send(post_head(p, 20000) + b"b" * 3000)
    time.sleep(0.5)
    c.rst()
    time.sleep(0.5)
    expect_origin_never_saw(ctx, p, 20000)
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A4", "silent mid-body -> 408 or a plain close after "
      "transaction_no_activity_timeout_in, not earlier; never a 2xx")
def p2_a4(ctx):
    p = ctx.path("sink/bytes/100", cacheable=False)
    c = ctx.client()
    c.send(post_head(p, 20000) + b"b" * 3000)
    o = c.read_response(T_IN + T_OUT + LATE)
    expect(c.read_until_close(5), "no close: %r" % o)
    expect_status_or_close(o, (408,), "silent body")
    expect_elapsed(c.eof_at - c.t_sent, T_IN, T_IN, "silent body closed")
    c.close()
    expect_origin_never_saw(ctx, p, 20000)
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A5", "the origin READS an 8 MiB body slowly (about 8 s; the "
      "client is held back, not idle) -> never cut; 200; body byte-exact")
def p2_a5(ctx):
    p = ctx.path("sink/slow-read/60/bytes/100", cacheable=False)
    body = seeded(ctx.tag + "-req", BIG)
    c = ctx.client(timeout=60)
    c.send(post_head(p, len(body)) + body)
    expect_complete(c.read_response(T_OUT + LATE), ctx.body(100))
    c.close()
    origin_body_ok(ctx, p, body)
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A6", "the origin stops reading the body and answers nothing "
      "(8 MiB body backs up) -> 504 or a plain close, never a 2xx")
def p2_a6(ctx):
    p = ctx.path("deaf/20000/bytes/100", cacheable=False)
    body = seeded(ctx.tag + "-req", BIG)
    c = ctx.client(timeout=T_OUT + T_IN + LATE)
    try:
        c.send(post_head(p, len(body)) + body)
    except OSError:
        pass            # the proxy gave up while we were still sending
    o = c.read_response(T_OUT + LATE)
    expect_status_or_close(o, (504, 502, 408), "origin deaf to the body")
    expect(o.kind != "open", "no answer within %ds: %r" % (T_OUT + LATE, o))
    c.close()
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A7", "the origin closes before reading the body -> 502")
def p2_a7(ctx):
    p = ctx.path("close-early/bytes/100", cacheable=False)
    c = ctx.client()
    c.send(post_head(p, 20000) + b"b" * 20000)
    o = c.read_response(T_OUT + LATE)
    expect(o.kind == "complete" and o.status == 502, "want a 502, got %r"
           % o)
    c.close()
    followup(ctx, p, ctx.body(100), "either")


@cell("P2.A8", "the origin resets before reading the body -> 502")
def p2_a8(ctx):
    p = ctx.path("reset-early/bytes/100", cacheable=False)
    c = ctx.client()
    c.send(post_head(p, 20000) + b"b" * 20000)
    o = c.read_response(T_OUT + LATE)
    expect(o.kind == "complete" and o.status == 502, "want a 502, got %r"
           % o)
    c.close()
    followup(ctx, p, ctx.body(100), "either")


# ---------------------------------------------------------------------------
# P3: waiting for the origin (the request is complete, no response byte)

na("P3", ["A1"], "there is nothing to read yet (slow readers: P5, P6)")
na("P3", ["A5"], "a trickle is response bytes: rows P4 and P5")
na("P3", ["A9"], "the head is row P4")
na("P3", ["A10"], "nothing is announced before the head: row P5")


@cell("P3.A2", "half-close after the complete request -> the whole "
      "response, then the close; stored")
def p3_a2(ctx):
    p = ctx.path("delay/1000/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    c.half_close()
    expect_complete(c.read_response(T_OUT + LATE), ctx.body(20000))
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the response "
           "to a half-closed request")
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P3.A3", "reset while the origin works -> dropped, no leak; the "
      "follow-up is a clean miss (or a clean hit if the fill completed)")
def p3_a3(ctx):
    p = ctx.path("delay/1500/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    time.sleep(0.5)
    c.rst()
    time.sleep(1.5)
    followup(ctx, p, ctx.body(20000), "either")


@cell("P3.A4", "the client sends and reads nothing while the origin takes "
      "2.8 s (past transaction_no_activity_timeout_in, within ..._out) "
      "-> 200, stored")
def p3_a4(ctx):
    p = ctx.path("delay/2800/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    time.sleep(T_IN + 1.5)
    expect_complete(c.read_response(T_OUT + LATE), ctx.body(20000))
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P3.A6", "the origin is silent -> 504 after "
      "transaction_no_activity_timeout_out, not earlier; nothing stored")
def p3_a6(ctx):
    p = ctx.path("hang/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE + 5)
    expect(o.kind == "complete" and o.status == 504, "want a 504, got %r"
           % o)
    expect_elapsed(time.monotonic() - c.t_sent, T_OUT, T_OUT, "504")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P3.A7", "the origin closes without a byte -> 502; nothing stored")
def p3_a7(ctx):
    p = ctx.path("close/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    expect_gateway_error(ctx, o, p, 502, ctx.body(20000))
    c.close()
    followup(ctx, p, ctx.body(20000), "either" if o.status == 200 else "no")


@cell("P3.A8", "the origin resets without a byte -> 502; nothing stored")
def p3_a8(ctx):
    p = ctx.path("reset/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    expect_gateway_error(ctx, o, p, 502, ctx.body(20000))
    c.close()
    followup(ctx, p, ctx.body(20000), "either" if o.status == 200 else "no")


# ---------------------------------------------------------------------------
# P4: the response head

na("P4", ["A1"], "a head is a few hundred bytes; slow readers: P5, P6")
na("P4", ["A4"], "a client waiting for a head sends and reads nothing by "
   "nature: P3.A4")
na("P4", ["A10"], "nothing is announced until the head ends: row P5")

MALFORMED = ["status-line", "no-colon", "bad-length", "two-lengths",
             "length-and-chunked", "empty-lines"]


@cell("P4.A2", "half-close while the origin trickles its head -> the whole "
      "response, then the close; stored")
def p4_a2(ctx):
    p = ctx.path("slow-head/400/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    time.sleep(1.0)
    c.half_close()
    expect_complete(c.read_response(T_OUT + LATE + 5), ctx.body(20000))
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the response "
           "to a half-closed request")
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P4.A3", "reset while the origin trickles its head -> dropped; the "
      "follow-up is clean")
def p4_a3(ctx):
    p = ctx.path("slow-head/500/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    time.sleep(1.2)
    c.rst()
    time.sleep(4.5)
    followup(ctx, p, ctx.body(20000), "either")


@cell("P4.A5", "the origin sends its head one line every 0.8 s (about 6 s, "
      "past every timeout) -> never cut; 200; stored")
def p4_a5(ctx):
    p = ctx.path("slow-head/800/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    expect_complete(c.read_response(T_OUT + LATE + 10), ctx.body(20000))
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P4.A6", "the origin goes silent mid-head -> 504 after "
      "transaction_no_activity_timeout_out, not earlier; nothing stored")
def p4_a6(ctx):
    p = ctx.path("head-stall/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE + 5)
    expect(o.kind == "complete" and o.status == 504, "want a 504, got %r"
           % o)
    expect_elapsed(time.monotonic() - c.t_sent, T_OUT, T_OUT, "504")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P4.A7", "the origin closes mid-head -> 502; nothing stored")
def p4_a7(ctx):
    p = ctx.path("head-close/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    expect(o.kind == "complete" and o.status == 502, "want a 502, got %r"
           % o)
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P4.A8", "the origin resets mid-head -> 502; nothing stored")
def p4_a8(ctx):
    p = ctx.path("head-reset/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    expect(o.kind == "complete" and o.status == 502, "want a 502, got %r"
           % o)
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


def _malformed_cell(kind):
    def fn(ctx):
        p = ctx.path("malformed/%s/bytes/2000" % kind)
        c = ctx.client()
        c.send(get_req(p))
        o = c.read_response(T_OUT + LATE)
        expect(o.kind == "complete" and o.status == 502,
               "malformed head (%s): want a 502, got %r" % (kind, o))
        c.close()
        probe_not_reused(ctx, origin_conn_of(ctx, p))
        followup(ctx, p, ctx.body(2000), "no")
    fn.__name__ = "p4_a9_" + kind.replace("-", "_")
    return fn


for _i, _k in enumerate(MALFORMED):
    cell("P4.A9%s" % "abcdefgh"[_i],
         "malformed head: %s -> 502; nothing stored; the origin "
         "connection not reused" % _k)(_malformed_cell(_k))


# ---------------------------------------------------------------------------
# P5: the response body on a miss (cacheable)

@cell("P5.A1", "a 20 KiB miss read at 1 KiB/s (20 s, small receive "
      "buffer) -> never cut; byte-exact; stored")
def p5_a1(ctx):
    p = ctx.path("bytes/20480")
    c = ctx.client(rcvbuf=2048)
    c.send(get_req(p))
    expect_complete(c.read_response(60, rate=SLOW), ctx.body(20480))
    c.close()
    followup(ctx, p, ctx.body(20480), "yes")


@cell("P5.A2", "half-close mid-body -> the whole response, then the "
      "close; stored")
def p5_a2(ctx):
    p = ctx.path("slow-body/20000/300")
    c = ctx.client()
    c.send(get_req(p))
    c.recv_some(5)
    time.sleep(0.7)
    c.half_close()
    expect_complete(c.read_response(T_OUT + LATE + 5), ctx.body(20000))
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the response "
           "to a half-closed request")
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P5.A3", "reset mid-body -> the fill is aborted or completes; the "
      "follow-up is a clean miss or a clean hit")
def p5_a3(ctx):
    p = ctx.path("slow-body/20000/300")
    c = ctx.client()
    c.send(get_req(p))
    c.recv_some(5)
    time.sleep(1.0)
    c.rst()
    time.sleep(3.5)
    followup(ctx, p, ctx.body(20000), "either")


@cell("P5.A4", "the client stops reading an 8 MiB miss -> cut after "
      "transaction_no_activity_timeout_in (the rest, read later, ends "
      "short); the follow-up is clean")
def p5_a4(ctx):
    p = ctx.path("stream/%d" % BIG)
    c = ctx.client(rcvbuf=4096)
    c.send(get_req(p))
    while len(c.buf) < 65536 and c.recv_some(10, 8192):
        pass
    time.sleep(T_IN + 6)
    o = c.read_response(T_IN + LATE)
    expect_cut(o, "a response the client stopped reading")
    c.close()
    followup(ctx, p, ctx.body(BIG), "either")


@cell("P5.A5", "the origin trickles the body (10 pieces 0.7 s apart: "
      "past transaction_no_activity_timeout_out) -> never cut; stored")
def p5_a5(ctx):
    p = ctx.path("slow-body/20000/700")
    c = ctx.client()
    c.send(get_req(p))
    expect_complete(c.read_response(T_OUT + LATE + 10), ctx.body(20000))
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P5.A6", "the origin goes silent mid-body -> the client is cut "
      "after transaction_no_activity_timeout_out (short of "
      "Content-Length), not earlier; nothing stored")
def p5_a6(ctx):
    p = ctx.path("stall/20000")
    c = ctx.client()
    c.send(get_req(p))
    while _parse_head(c.buf) is None and c.recv_some(10):
        pass
    t_head = time.monotonic()
    o = c.read_response(T_OUT + LATE + 5)
    expect_cut(o, "a body the origin stopped sending")
    expect_elapsed(c.eof_at - t_head, T_OUT, T_OUT, "stalled body cut")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P5.A6b", "the origin goes silent right after its head -> 504 (head "
      "not forwarded yet) or the client cut; never complete; nothing "
      "stored")
def p5_a6b(ctx):
    p = ctx.path("silent-after-head/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE + 5)
    if o.kind == "complete":
        expect_eq(o.status, 504, "silent after the head: %r" % o)
    else:
        expect_cut(o, "a body that never came")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P5.A7", "the origin closes mid-body -> the client is cut; nothing "
      "stored")
def p5_a7(ctx):
    p = ctx.path("close-mid-body/20000")
    c = ctx.client()
    c.send(get_req(p))
    expect_cut(c.read_response(T_OUT + LATE), "a body the origin closed")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P5.A8", "the origin resets mid-body -> the client is cut; nothing "
      "stored")
def p5_a8(ctx):
    p = ctx.path("reset-mid-body/20000")
    c = ctx.client()
    c.send(get_req(p))
    expect_cut(c.read_response(T_OUT + LATE), "a body the origin reset")
    c.close()
    followup(ctx, p, ctx.body(20000), "no")


@cell("P5.A9", "malformed chunked framing mid-body (chunk size `zz`) -> "
      "the client is cut (no last chunk) or 502; nothing stored; the origin "
      "connection not reused")
def p5_a9(ctx):
    p = ctx.path("malformed/bad-chunk/bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    if o.kind == "complete":
        expect_eq(o.status, 502, "bad chunk framing: %r" % o)
    else:
        expect_cut(o, "a body with bad chunk framing")
    c.close()
    probe_not_reused(ctx, origin_conn_of(ctx, p))
    followup(ctx, p, ctx.body(20000), "no")


def _more_than_announced(ctx, directive):
    p = ctx.path("bytes/20000/%s" % directive)
    c = ctx.client()
    c.send(get_req(p))
    o = c.read_response(T_OUT + LATE)
    expect_complete(o, ctx.body(20000))
    # nothing after the response on a kept-alive client connection
    deadline = time.monotonic() + 1.0
    while not c.eof and time.monotonic() < deadline:
        c.recv_some(deadline - time.monotonic())
    o2 = c.outcome()
    expect_eq(bytes(o2.extra), b"", "bytes after the response")
    expect(b"SMUGGLED" not in c.buf and b"XXXX" not in c.buf,
           "the extra bytes reached the client")
    c.close()
    probe_not_reused(ctx, origin_conn_of(ctx, p))
    r = followup(ctx, p, ctx.body(20000), "either")
    expect(b"SMUGGLED" not in r.body, "smuggled response served")


@cell("P5.A10", "Content-Length N, then N+100 bytes -> exactly N bytes, a "
      "complete response; the extra never served; the origin connection "
      "not reused; stored only with the N bytes")
def p5_a10(ctx):
    _more_than_announced(ctx, "extra/100")


@cell("P5.A10b", "Content-Length N, then a whole second response in the "
      "same write -> as P5.A10: never parsed as a response, never served")
def p5_a10b(ctx):
    _more_than_announced(ctx, "smuggle")


# ---------------------------------------------------------------------------
# P6: the body of a hit (preloaded)

na("P6", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "a hit does not touch the origin")


@cell("P6.A1", "a 20 KiB hit read at 1 KiB/s (20 s, small receive "
      "buffer) -> never cut; byte-exact", preload=("bytes/20480", 20480))
def p6_a1(ctx):
    p = ctx.path("bytes/20480")
    c = ctx.client(rcvbuf=2048)
    c.send(get_req(p))
    o = c.read_response(60, rate=SLOW)
    expect_complete(o, ctx.body(20480))
    expect(is_hit(o.resp), "not a hit")
    c.close()
    followup(ctx, p, ctx.body(20480), "yes")


@cell("P6.A2", "half-close after the request -> the whole hit, then the "
      "close", preload=("bytes/20000", 20000))
def p6_a2(ctx):
    p = ctx.path("bytes/20000")
    c = ctx.client()
    c.send(get_req(p))
    c.half_close()
    o = c.read_response(T_IN + LATE)
    expect_complete(o, ctx.body(20000))
    expect(is_hit(o.resp), "not a hit")
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the hit to a "
           "half-closed request")
    c.close()
    followup(ctx, p, ctx.body(20000), "yes")


@cell("P6.A3", "reset mid-hit (8 MiB) -> dropped; the object is still a "
      "clean hit", preload=("stream/%d" % BIG, BIG))
def p6_a3(ctx):
    p = ctx.path("stream/%d" % BIG)
    c = ctx.client(rcvbuf=4096)
    c.send(get_req(p))
    while len(c.buf) < 65536 and c.recv_some(10, 8192):
        pass
    c.rst()
    time.sleep(0.5)
    followup(ctx, p, ctx.body(BIG), "yes")


@cell("P6.A4", "the client stops reading an 8 MiB hit -> cut after "
      "transaction_no_activity_timeout_in; the object is still a clean hit",
      preload=("stream/%d" % BIG, BIG))
def p6_a4(ctx):
    p = ctx.path("stream/%d" % BIG)
    c = ctx.client(rcvbuf=4096)
    c.send(get_req(p))
    while len(c.buf) < 65536 and c.recv_some(10, 8192):
        pass
    time.sleep(T_IN + 6)
    expect_cut(c.read_response(T_IN + LATE), "a hit the client stopped "
               "reading")
    c.close()
    followup(ctx, p, ctx.body(BIG), "yes")


# ---------------------------------------------------------------------------
# P7: the PUSH body (a whole response in the request body)

na("P7", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "a PUSH never contacts the origin")


def push_bytes(ctx, n):
    body = ctx.body(n, ctx.tag + "-push")
    head = ("HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
            "Content-Length: %d\r\n\r\n" % n).encode()
    return head + body, body


def push_head(path, n):
    return ("PUSH %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n"
            % (path, HOST, n)).encode("latin-1")


@cell("P7.A1", "the client SENDS a 6 KiB PUSH at 1 KiB/s (past "
      "transaction_no_activity_timeout_in) -> 201; stored byte-exact")
def p7_a1(ctx):
    p = ctx.path("bytes/6000")
    data, body = push_bytes(ctx, 6000)
    c = ctx.client()
    c.send(push_head(p, len(data)))
    c.send_slowly(data)
    o = c.read_response(T_IN + LATE)
    expect(o.kind == "complete" and o.status == 201, "PUSH answer: %r" % o)
    c.close()
    followup(ctx, p, body, "yes")


@cell("P7.A2", "half-close after the whole PUSH -> 201; stored")
def p7_a2(ctx):
    p = ctx.path("bytes/6000")
    data, body = push_bytes(ctx, 6000)
    c = ctx.client()
    c.send(push_head(p, len(data)) + data)
    c.half_close()
    o = c.read_response(T_IN + LATE)
    expect(o.kind == "complete" and o.status == 201, "PUSH answer: %r" % o)
    c.close()
    followup(ctx, p, body, "yes")


@cell("P7.A2b", "half-close mid-PUSH-body -> 400 or a plain close, never "
      "a 2xx; nothing stored")
def p7_a2b(ctx):
    p = ctx.path("bytes/6000")
    data, body = push_bytes(ctx, 6000)
    c = ctx.client()
    c.send(push_head(p, len(data)) + data[:3000])
    c.half_close()
    o = c.read_response(T_IN + LATE)
    expect_status_or_close(o, (400,), "half-closed PUSH")
    expect(c.read_until_close(5), "open after a half-closed PUSH")
    expect_prompt(c, "half-closed PUSH")
    c.close()
    followup(ctx, p, ctx.body(6000), "no")


@cell("P7.A3", "reset mid-PUSH-body -> nothing stored; the follow-up is a "
      "clean miss")
def p7_a3(ctx):
    p = ctx.path("bytes/6000")
    data, body = push_bytes(ctx, 6000)
    c = ctx.client()
    c.send(push_head(p, len(data)) + data[:3000])
    time.sleep(0.3)
    c.rst()
    time.sleep(0.5)
    followup(ctx, p, ctx.body(6000), "no")


@cell("P7.A4", "silent mid-PUSH-body -> 408 or a plain close after "
      "transaction_no_activity_timeout_in, not earlier; nothing stored")
def p7_a4(ctx):
    p = ctx.path("bytes/6000")
    data, body = push_bytes(ctx, 6000)
    c = ctx.client()
    c.send(push_head(p, len(data)) + data[:3000])
    o = c.read_response(T_IN + LATE + 5)
    expect(c.read_until_close(5), "no close: %r" % o)
    expect_status_or_close(o, (408,), "silent PUSH")
    expect_elapsed(c.eof_at - c.t_sent, T_IN, T_IN, "silent PUSH closed")
    c.close()
    followup(ctx, p, ctx.body(6000), "no")


# ---------------------------------------------------------------------------
# P8: a tunnel.  CONNECT 127.0.0.1:PORT to a raw TCP target of the cell's
# own (connect_ports "*", remap_required 0), and one Upgrade (a WebSocket
# origin behind the remap rule of ws.test).  The relay holds at most a
# buffer per direction; an end of stream becomes a half-close on the other
# side; a reset resets both; no byte either way for T_IDLE closes both.

T_IDLE = min(T_IN, T_OUT)   # the tunnel's idle timeout
WS_HOST = "ws.test"

na("P8", ["A9"], "a tunnel carries opaque bytes: after the 200 (or the "
   "101) there is no head to be malformed; an unreachable target is a 502 "
   "(test_tunnel.py)")
na("P8", ["A10"], "nothing is announced: a tunnel has no length, every "
   "byte is relayed until the end of stream")


def open_tunnel(ctx, handler, rcvbuf=None):
    """A target of this cell (handler(sock) runs for its connection, in a
    thread) and a client tunnelled to it with CONNECT: (client, server).
    The client's buffer holds what came after the 200."""
    srv = tun.Server(handler)
    ctx.servers.append(srv)
    ctx.lports.append(srv.port)     # the worker's socket to it is the cell's
    c = ctx.client(rcvbuf=rcvbuf)
    c.send(("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n"
            % (srv.port, srv.port)).encode())
    deadline = time.monotonic() + T_OUT + LATE
    while _parse_head(c.buf) is None and not c.eof \
            and time.monotonic() < deadline:
        c.recv_some(1.0)
    ph = _parse_head(c.buf)
    expect(ph is not None, "no answer to CONNECT: %r" % bytes(c.buf[:200]))
    expect_eq(ph[0].status, 200, "CONNECT status")
    del c.buf[:ph[1]]
    return c, srv


def kernel_queued(ports):
    """Bytes in the send and receive queues of every TCP connection with
    an end on one of ports (/proc/net/tcp and tcp6: tx_queue, rx_queue)."""
    total = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            col = row.split()
            if col[3] == "0A":                      # LISTEN
                continue
            lp, rp = int(col[1].rsplit(":", 1)[1], 16), int(col[2].rsplit(":", 1)[1], 16)
            if lp in ports or rp in ports:
                tx, rx = col[4].split(":")
                total += int(tx, 16) + int(rx, 16)
    return total


def ended_by(fn, log):
    """Run fn(); append (how it ended, when) to log: "done", or the name
    of the exception (the tunnel cut, reset or timed out)."""
    try:
        fn()
        log.append(("done", time.monotonic()))
    except OSError as e:
        log.append((type(e).__name__, time.monotonic()))


def expect_tunnel_eof(c, want, what):
    """The client got exactly want, then an orderly EOF (not a reset)."""
    expect(c.eof, "%s: no EOF (%d bytes)" % (what, len(c.buf)))
    expect(not c.reset, "%s: reset, not an orderly end" % what)
    expect_body(bytes(c.buf), want, what)


TUN_BIG = 2 * BIG           # P8.A1's stream: far more than the socket
#                             buffers on the way hold (about 2.5 MiB on
#                             loopback, most of it the worker's send
#                             buffer to the client)


@cell("P8.A1", "the client reads the target's 16 MiB at 1 KiB/s (12 s: "
      "past the idle timeout several times), then fast -> never cut; every "
      "byte in order, then the EOF; the target is held back meanwhile (less "
      "than 8 MiB ahead of the reader: memory bounded)")
def p8_a1(ctx):
    data = ctx.body(TUN_BIG)
    sent = [0]
    log = []

    def blast(s):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)

        def go():
            for i in range(0, TUN_BIG, 65536):
                s.sendall(data[i:i + 65536])
                sent[0] = min(TUN_BIG, i + 65536)
            s.shutdown(socket.SHUT_WR)
            tun.recv_all(s, 120)
        ended_by(go, log)

    c, srv = open_tunnel(ctx, blast, rcvbuf=2048)
    slow_until = time.monotonic() + 12
    while time.monotonic() < slow_until and not c.eof:
        t0 = time.monotonic()
        c.recv_some(1.0, SLOW // 4)
        rest = 0.25 - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
    expect(not c.eof, "the tunnel was closed while its client read at "
           "1 KiB/s (%d bytes read)" % len(c.buf))
    ahead = sent[0] - len(c.buf)
    # What the kernel holds on the way (both sockets' queues at each hop)
    # is not the relay's: its receive buffers autotune up to tcp_rmem's
    # maximum (32 MiB on some machines), so under load the target gets
    # far ahead with the relay holding nothing.  The relay's own share is
    # what is left.
    held = ahead - kernel_queued({c.sock.getsockname()[1], srv.port})
    expect(held < 2 * MIB, "the relay holds %d bytes (the target %d ahead of "
           "a reader at %d): it is not holding the target back"
           % (held, ahead, len(c.buf)))
    expect(c.read_until_close(60), "no EOF after the target's end (%d of "
           "%d bytes)" % (len(c.buf), TUN_BIG))
    expect(len(c.buf) >= TUN_BIG, "the tunnel ended after %d of %d bytes, "
           "%s: cut while its client read at 1 KiB/s" % (
               len(c.buf), TUN_BIG, "with a reset" if c.reset else
               "with an orderly EOF (the cut looks like the stream's end)"))
    expect_tunnel_eof(c, data, "16 MiB through the tunnel")
    c.close()
    harness.wait_for(lambda: log, 10, what="the target's end")
    expect_eq(log[0][0], "done", "how the target's side ended")


@cell("P8.A2", "the client half-closes (after 50 KB up) -> the target "
      "gets every byte, then the EOF; what it sends after the EOF (70 KB, "
      "behind 30 KB before it) reaches the client whole, then the EOF")
def p8_a2(ctx):
    up = ctx.body(50000, ctx.tag + "-up")
    down = ctx.body(100000)
    got = []

    def target(s):
        s.sendall(down[:30000])
        got.append(tun.recv_all(s, 30))
        s.sendall(down[30000:])
        s.shutdown(socket.SHUT_WR)

    c, srv = open_tunnel(ctx, target)
    while len(c.buf) < 30000 and c.recv_some(10) is not None:
        pass
    c.send(up)
    c.half_close()
    expect(c.read_until_close(T_OUT + LATE), "no EOF after the target's "
           "answer to a half-close (%d bytes)" % len(c.buf))
    expect_tunnel_eof(c, down, "the target's bytes")
    c.close()
    harness.wait_for(lambda: got, 10, what="the target's EOF")
    expect_body(got[0], up, "what the target got")
    expect_eq(srv.errors, [], "target errors")


@cell("P8.A3", "the client resets while the target streams -> both "
      "sockets closed at once (the target's stream is cut by the reset, "
      "not by the idle timer); the worker's fds back")
def p8_a3(ctx):
    data = ctx.body(BIG)
    log = []

    def target(s):
        def go():
            for i in range(0, BIG, 65536):
                s.sendall(data[i:i + 65536])
            tun.recv_all(s, 60)
        ended_by(go, log)

    c, srv = open_tunnel(ctx, target, rcvbuf=4096)
    while len(c.buf) < 65536 and c.recv_some(10, 8192) is not None:
        pass
    t_rst = time.monotonic()
    c.rst()
    harness.wait_for(lambda: log, T_IDLE + LATE, what="the target's "
                     "stream to end after the client's reset")
    how, t = log[0]
    expect(how != "done", "the target sent all %d bytes to a client that "
           "had reset" % BIG)
    expect(t - t_rst < T_IDLE - EARLY, "the target's side ended %.2fs after "
           "the client's reset: by the idle timer (%r)" % (t - t_rst, how))


@cell("P8.A4", "the client goes silent (after the target's greeting) -> "
      "both sides closed (EOF) after min(transaction_no_activity_timeout_in,"
      " _out), not earlier")
def p8_a4(ctx):
    hello = b"220 " + ctx.body(100) + b"\r\n"
    log = []

    def target(s):
        s.sendall(hello)
        ended_by(lambda: tun.recv_all(s, 60), log)

    c, srv = open_tunnel(ctx, target)
    expect(c.read_until_close(T_IDLE + LATE + 5), "no close of an idle "
           "tunnel")
    expect_tunnel_eof(c, hello, "the greeting")
    expect_elapsed(c.eof_at - c.t_sent, T_IDLE, T_IDLE, "idle tunnel "
                   "closed")
    c.close()
    harness.wait_for(lambda: log, 10, what="the target's side closed")
    expect_eq(log[0][0], "done", "how the target's side ended (EOF)")


@cell("P8.A5", "the target trickles 20 KB (10 pieces 0.7 s apart: past "
      "both transaction timeouts) -> never cut; byte-exact, then the EOF")
def p8_a5(ctx):
    data = ctx.body(20000)

    def target(s):
        for i in range(0, len(data), 2000):
            if i:
                time.sleep(0.7)
            s.sendall(data[i:i + 2000])
        s.shutdown(socket.SHUT_WR)
        tun.recv_all(s, 30)

    c, srv = open_tunnel(ctx, target)
    expect(c.read_until_close(T_OUT + LATE + 10), "no EOF after a "
           "trickle (%d bytes)" % len(c.buf))
    expect_tunnel_eof(c, data, "the trickled bytes")
    c.close()
    expect_eq(srv.errors, [], "target errors")


@cell("P8.A6", "the target reads the client's bytes and goes silent -> "
      "both sides closed (EOF) after min(transaction_no_activity_timeout_"
      "in, _out), not earlier")
def p8_a6(ctx):
    hello = b"HELO " + ctx.body(100) + b"\r\n"
    got, log = [], []

    def target(s):
        got.append(tun.recv_exact(s, len(hello)))
        ended_by(lambda: got.append(tun.recv_all(s, 60)), log)

    c, srv = open_tunnel(ctx, target)
    c.send(hello)
    expect(c.read_until_close(T_IDLE + LATE + 5), "no close of an idle "
           "tunnel")
    expect_tunnel_eof(c, b"", "what the silent target sent")
    expect_elapsed(c.eof_at - c.t_sent, T_IDLE, T_IDLE, "idle tunnel "
                   "closed")
    c.close()
    harness.wait_for(lambda: log, 10, what="the target's side closed")
    expect_eq(log[0][0], "done", "how the target's side ended (EOF)")
    expect_body(got[0], hello, "what the target got")


@cell("P8.A7", "the target answers 100 KB and closes -> the client gets "
      "every byte, then the EOF")
def p8_a7(ctx):
    req = ctx.body(1000, ctx.tag + "-up")
    data = ctx.body(100000)
    got = []

    def target(s):
        got.append(tun.recv_exact(s, len(req)))
        s.sendall(data)
        s.close()

    c, srv = open_tunnel(ctx, target)
    c.send(req)
    expect(c.read_until_close(T_OUT + LATE), "no EOF after the target "
           "closed (%d bytes)" % len(c.buf))
    expect_tunnel_eof(c, data, "the target's bytes")
    c.close()
    expect_body(got[0], req, "what the target got")


@cell("P8.A7b", "Upgrade: websocket through remap; the origin sends its "
      "101, two frames and closes -> the client gets the 101, the frames "
      "byte-exact, then the EOF")
def p8_a7b(ctx):
    ctx.lports.append(ctx.ws_port)
    p = "/%s/ws" % ctx.tag
    c = ctx.client()
    c.send(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: "
            "dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % (p, WS_HOST)).encode())
    expect(c.read_until_close(T_OUT + LATE), "no EOF after the WebSocket "
           "origin closed (%d bytes)" % len(c.buf))
    ph = _parse_head(c.buf)
    expect(ph is not None, "no head: %r" % bytes(c.buf[:200]))
    expect_eq(ph[0].status, 101, "status of the Upgrade")
    del c.buf[:ph[1]]
    expect_tunnel_eof(c, ws_frames(p), "the frames after the 101")
    c.close()


@cell("P8.A8", "the target sends 10 KB and resets -> the client's side is "
      "closed at once (not by the idle timer), after a prefix of the bytes")
def p8_a8(ctx):
    data = ctx.body(10000)
    t_rst = []

    def target(s):
        s.sendall(data)
        time.sleep(0.5)
        t_rst.append(time.monotonic())
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                     b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()

    c, srv = open_tunnel(ctx, target)
    expect(c.read_until_close(T_IDLE + LATE), "the client's side still open "
           "after the target reset (%d bytes)" % len(c.buf))
    expect(t_rst, "the target never reset")
    expect(c.eof_at - t_rst[0] < T_IDLE - EARLY, "the client's side closed "
           "%.2fs after the target's reset: by the idle timer"
           % (c.eof_at - t_rst[0]))
    expect(data.startswith(bytes(c.buf)), "the client got bytes that are not "
           "a prefix of the target's (%d bytes)" % len(c.buf))
    c.close()


def ws_frames(path):
    return tun.ws_frame(1, b"bye " + path.encode()) + \
        tun.ws_frame(2, seeded(path, 20000))


def ws_origin(s):
    """The WebSocket origin of P8.A7b: the 101, two frames, the close."""
    s.settimeout(30)
    req = b""
    while b"\r\n\r\n" not in req:
        d = s.recv(4096)
        if not d:
            return
        req += d
    path = req.split(b" ")[1].decode()
    if b"upgrade: websocket" not in req.lower():
        s.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n"
                  b"\r\n")
        return
    s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
              b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n" + ws_frames(path))
    s.close()


# ---------------------------------------------------------------------------
# Issue 21's capabilities: a read-while-writer joiner (P9-P11), a slice
# fetch (P12), a background fill (P13).  Their adversities are the ones
# that apply to them (ADVS_OF): the client and origin faults above, plus a
# reload and a kill -9 of the filling worker (A11, A12: "solo" cells, each
# on a daemon of its own with two workers, since they change the workers
# the concurrent run counts on), and the slice's own origin faults (A13,
# A14).  "Nothing short or mixed stored": every cell ends with the
# follow-up GET (a byte-exact hit or miss) of the object it touched.

JN = 4 << 20            # a joined fill: over COLLAPSE_LARGE (1 MiB), so
#                         published for read-while-writer
JRATE = 1 << 20         # ...sent at 1 MiB/s: a 4 s fill
JBIG = 8 << 20          # the silent joiner's fill: more than socket
#                         buffers hold (at 4 MiB/s)
JOIN_AT = {"P9": None, "P10": 0.5, "P11": 0.8}  # None: before the head;
#   P11 at 80%: 0.6 s before its origin fails at 95% (at 90%, 0.2 s, a
#   busy concurrent run saw the fill end before the joiner came)
JOIN_HEAD_MS = 1500     # P9: the origin holds its head back this long


class Reader(threading.Thread):
    """One client GET read in a thread: got (body bytes so far), o (the
    Outcome at the end), t_end.  rate: read at about rate bytes/s; leave:
    reset after that many body bytes (-1: 0.5 s after the request, before
    any answer); silent:
    read nothing after the first 64 KiB for `silent` seconds, then read
    on; half_close: shut down the sending side after the request."""

    def __init__(self, ctx, path, rate=None, leave=None, silent=None,
                 half_close=False, rcvbuf=None, timeout=60.0,
                 headers="", host=HOST):
        super().__init__(daemon=True)
        self.c = ctx.client(rcvbuf=rcvbuf, timeout=timeout)
        self.path, self.rate, self.leave = path, rate, leave
        self.silent, self.half, self.timeout = silent, half_close, timeout
        self.headers, self.host = headers, host
        self.got, self.o, self.err, self.t_end = -1, None, None, None
        self.left = False
        self.t0 = time.monotonic()

    def run(self):
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 (reported by the cell)
            self.err = "%s: %s" % (type(e).__name__, e)
        self.t_end = time.monotonic()

    def _count(self):
        he = self.c.buf.find(b"\r\n\r\n")
        if he >= 0:
            self.got = len(self.c.buf) - he - 4

    def _run(self):
        c = self.c
        c.send(get_req(self.path, self.headers, self.host))
        if self.half:
            c.half_close()
        if self.leave == -1:
            time.sleep(0.5)
            expect_eq(bytes(c.buf), b"", "an answer before the client left")
            self.left = True
            c.rst()
            return
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.leave is not None and self.got >= self.leave:
                self.left = True
                c.rst()
                return
            o = c.outcome()
            if o.kind != "open":
                break
            if self.silent and self.got >= 65536:
                time.sleep(self.silent)
                self.silent = None
            n = int(self.rate * 0.1) if self.rate else 1 << 20
            t = time.monotonic()
            if c.recv_some(1.0, n) is None:
                break
            self._count()
            if self.rate:
                time.sleep(max(0.0, 0.1 - (time.monotonic() - t)))
        self.o = c.outcome()
        self.o.closed_at = c.eof_at
        c.close()

    def finish(self, timeout=90):
        self.join(timeout)
        expect(not self.is_alive(), "a client of %s still reading after "
               "%ds" % (self.path, timeout))
        expect(self.err is None, "client of %s: %s" % (self.path, self.err))
        return self.o


def joined(o):
    return o.resp is not None and "read-while-writer" in (
        o.resp.header("Cache-Status") or "")


def origin_count(ctx, path):
    return sum(1 for rec in ctx.origin.requests() if rec["target"] == path)


def jpath(ctx, ph, faults="", n=JN, orate=JRATE):
    """A joined fill's URL: for P9 the origin holds its head back."""
    pre = "delay/%d/" % JOIN_HEAD_MS if JOIN_AT[ph] is None else ""
    return ctx.path("%s%sstream/%d/rate/%d" % (pre, faults, n, orate))


def join_point(ctx, ph, filler, path, n=JN):
    """Wait for the phase ph of the filler's transfer: before its first
    byte (the origin has the request, its head is still held back), half
    way, or near the end."""
    at = JOIN_AT[ph]
    if at is None:
        harness.wait_for(lambda: origin_count(ctx, path) >= 1, 20,
                         what="the fill at the origin")
        time.sleep(0.3)
        expect(filler.got < 0, "the fill's head came before the joiner")
    else:
        harness.wait_for(lambda: filler.got >= n * at or filler.o, 40,
                         what="the filler at %d%%" % (at * 100))
        expect(filler.o is None, "the fill ended before the joiner came")


def start_join(ctx, ph, faults="", n=JN, orate=JRATE, **kw):
    """The filler, then a joiner at phase ph (kw: the joiner's Reader
    arguments): (path, filler, joiner)."""
    p = jpath(ctx, ph, faults, n, orate)
    filler = Reader(ctx, p)
    filler.start()
    join_point(ctx, ph, filler, p, n)
    joiner = Reader(ctx, p, **kw)
    joiner.start()
    return p, filler, joiner


def expect_joined_complete(o, want, what):
    expect_complete(o, want, what)
    expect(joined(o), "%s did not follow the fill (Cache-Status %r)"
           % (what, o.resp.header("Cache-Status")))


def expect_not_complete(o, what):
    """A failed fill: the client never sees a complete-looking body (a
    gateway error before any byte is fine)."""
    if o.kind == "complete":
        expect(o.status in (502, 504), "%s: a failed fill looked complete: "
               "%r" % (what, o))
    else:
        expect_cut(o, what)


JOINER_PHASES = [("P9", "read-while-writer joiner: joined before the "
                  "first byte"),
                 ("P10", "read-while-writer joiner: joined mid-body"),
                 ("P11", "read-while-writer joiner: joined near the end")]
for _p, _ in JOINER_PHASES:
    na(_p, ["A5"], "every joiner cell's origin trickles (1 MiB/s, a 4 s "
       "fill): the joiner follows the fill's pace")
    na(_p, ["A8"], "a reset fails the fill as a close does (A7); P5.A8 "
       "for the filler")
    na(_p, ["A9"], "a malformed head fails the fill before it is "
       "published: there is nothing to join (P4.A9)")
    na(_p, ["A10"], "the fill stores exactly Content-Length bytes "
       "(P5.A10) and a joiner reads only stored bytes")


def _j_slow(ph):
    def fn(ctx):
        p, filler, joiner = start_join(ctx, ph, rcvbuf=16384,
                                       rate=512 << 10)
        fo, jo = filler.finish(), joiner.finish()
        expect_complete(fo, ctx.body(JN), "the filler")
        expect_joined_complete(jo, ctx.body(JN), "the slow joiner")
        expect(filler.t_end - filler.t0 < JN / JRATE + 3 + LATE / 2,
               "the filler took %.1f s: held back by the slow joiner"
               % (filler.t_end - filler.t0))
        expect(joiner.t_end > filler.t_end + 1, "the joiner was not slow")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        followup(ctx, p, ctx.body(JN), "yes")
    return fn


def _j_half(ph):
    def fn(ctx):
        p, filler, joiner = start_join(ctx, ph, half_close=True)
        fo, jo = filler.finish(), joiner.finish()
        expect_complete(fo, ctx.body(JN), "the filler")
        expect_joined_complete(jo, ctx.body(JN), "the half-closed joiner")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        # the joiner's access log line has the origin's status too

        def logged():
            st = [ln.split('" ')[1].split()[0] for ln in access_log(ctx)
                  if (" %s " % p) in ln]
            return st if len(st) >= 2 else None
        expect_eq(harness.wait_for(logged, ALOG_FLUSH + LATE, what="the "
                                   "access log lines"), ["200", "200"],
                  "the statuses logged (filler, joiner)")
        followup(ctx, p, ctx.body(JN), "yes")
    return fn


def _j_reset(ph):
    def fn(ctx):
        leave = -1 if JOIN_AT[ph] is None else 65536
        p, filler, joiner = start_join(ctx, ph, leave=leave)
        joiner.finish()
        expect(joiner.left, "the joiner did not get to reset")
        expect_complete(filler.finish(), ctx.body(JN), "the filler")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        followup(ctx, p, ctx.body(JN), "yes")
    return fn


def _j_silent(ph):
    def fn(ctx):
        p, filler, joiner = start_join(ctx, ph, n=JBIG, orate=4 << 20,
                                       rcvbuf=4096, silent=T_IN + 6)
        fo, jo = filler.finish(), joiner.finish()
        expect_complete(fo, ctx.body(JBIG), "the filler")
        expect_cut(jo, "a joiner that stopped reading")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        followup(ctx, p, ctx.body(JBIG), "yes")
    return fn


def _j_origin(ph, fault):
    def fn(ctx):
        pct = 95 if ph == "P11" else 60
        p, filler, joiner = start_join(ctx, ph, "%s/%d/" % (fault, pct))
        fo, jo = filler.finish(), joiner.finish()
        expect_not_complete(fo, "the filler")
        expect_not_complete(jo, "the joiner")
        if fault == "stall-at":
            expect_elapsed(filler.t_end - filler.t0 - JN * pct / 100 / JRATE,
                           T_OUT, T_OUT + 2, "the stalled fill cut")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        followup(ctx, p, ctx.body(JN), "no")
    return fn


def _j_reload(ph):
    def fn(ctx):
        p, filler, joiner = start_join(ctx, ph)
        old = set(serving_workers(ctx.cistern))
        ctx.cistern.reload()
        fo, jo = filler.finish(), joiner.finish()
        expect_complete(fo, ctx.body(JN), "the filler")
        expect_joined_complete(jo, ctx.body(JN), "the joiner")
        harness.wait_for(lambda: not old & set(harness.children_of(
            ctx.cistern.pid)), T_KA_IN + LATE, what="the old workers to "
            "drain")
        expect_eq(origin_count(ctx, p), 1, "origin requests")
        followup(ctx, p, ctx.body(JN), "yes")
    return fn


def _j_kill(ph):
    def fn(ctx):
        ctx.cistern.expect_log(r"killed by signal 9")
        p, filler, joiner = start_join(ctx, ph)
        if JOIN_AT[ph] is None:     # the filler's worker: from the head
            harness.wait_for(lambda: filler.got >= 0, 20, what="the head")
        w = filler.c.outcome().raw if filler.got >= 0 else b""
        m = re.search(rb"X-Cistern-Worker: \d+; pid=(\d+)", bytes(w))
        expect(m, "no X-Cistern-Worker in the filler's head")
        os.kill(int(m.group(1)), 9)
        fo, jo = filler.finish(), joiner.finish()
        # complete only byte-exact: the fill may have ended (near the
        # end) before the kill; a waiter before the head that finds no
        # fill any more fetches for itself
        for o, what in ((fo, "the filler"), (jo, "the joiner")):
            if o.kind == "complete" and o.status == 200:
                expect_complete(o, ctx.body(JN), what)
            else:
                expect_not_complete(o, what)
        harness.wait_for(lambda: len(serving_workers(ctx.cistern)) == 2, 10,
                         what="the killed worker replaced")
        followup(ctx, p, ctx.body(JN), "either")
    return fn


for _p, _name in JOINER_PHASES:
    _when = {"P9": "before the fill's first byte", "P10": "at 50%",
             "P11": "at 80%"}[_p]
    cell("%s.A1" % _p, "a joiner (%s) reading at 512 KiB/s -> byte-exact; "
         "the fill not held back (the filler done at the origin's pace); "
         "one origin request; stored" % _when)(_j_slow(_p))
    cell("%s.A2" % _p, "a joiner (%s) half-closing after its request -> "
         "the whole body, byte-exact; stored" % _when)(_j_half(_p))
    cell("%s.A3" % _p, "a joiner (%s) resetting -> the filler unaffected "
         "(byte-exact), one origin request; stored" % _when)(_j_reset(_p))
    cell("%s.A4" % _p, "a joiner (%s) that stops reading an 8 MiB fill -> "
         "cut (never complete); the filler byte-exact; stored"
         % _when)(_j_silent(_p))
    cell("%s.A6" % _p, "the origin stalls at %d%% (the joiner came %s) -> "
         "filler and joiner cut after transaction_no_activity_timeout_out, "
         "never complete; nothing stored" % (95 if _p == "P11" else 60,
                                             _when))(_j_origin(_p, "stall-at"))
    cell("%s.A7" % _p, "the origin dies at %d%% (the joiner came %s) -> "
         "filler and joiner cut, never complete; nothing stored"
         % (95 if _p == "P11" else 60, _when))(_j_origin(_p, "die-at"))
    cell("%s.A11" % _p, "a reload with a joiner (%s) in flight -> filler "
         "and joiner byte-exact on the old worker, which then drains; one "
         "origin request; stored (solo)" % _when, solo=True)(_j_reload(_p))
    cell("%s.A12" % _p, "kill -9 of the filling worker (the joiner came "
         "%s) -> the filler and the joiner cut, or complete and byte-exact "
         "(a fill that ended before the kill, a waiter that fetched for "
         "itself), never a complete-looking short body; the worker "
         "replaced; the follow-up clean (solo)" % _when,
         solo=True)(_j_kill(_p))


# P12: a slice fetch (slice.blockbytes SLICE): a Range miss fetches the
# aligned blocks that hold it on an internal request; the client waits.

SLICE = RECORDS["proxy.config.cistern.slice.blockbytes"]
SN = 3 * SLICE + 1000           # a sliced object: four blocks
na("P12", ["A1", "A2", "A4"], "the client waits for the slice like a "
   "collapsed waiter, then reads a stored part: a hit's body (P6)")
na("P12", ["A5", "A6"], "the slice fetch is an origin fetch: P5.A5, P5.A6 "
   "(its client waits within collapse_timeout)")
na("P12", ["A8", "A9", "A10"], "as for any origin fetch (P4, P5): A7 "
   "covers a slice that fails")
na("P12", ["A11", "A12"], "as for any fill: P9-P11.A11, A12")


def slice_ranges(ctx, path):
    """The Range values of the origin's requests for path."""
    return [harness.header_of(rec, "Range") for rec in ctx.origin.requests()
            if rec["target"] == path]


def range_client(ctx, path, a, b):
    c = ctx.client()
    c.send(get_req(path, "Range: bytes=%d-%d\r\n" % (a, b)))
    return c


def range_get(ctx, path, a, b, want, what, stored=None):
    r = harness.one_request(ctx.port, "GET", path, host=HOST, timeout=60,
                            headers=[("Range", "bytes=%d-%d" % (a, b))])
    expect(r is not None, "%s: no complete response" % what)
    expect_eq(r.status, 206, "%s status" % what)
    expect_eq(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, len(want)),
              "%s Content-Range" % what)
    expect_body(r.body, want[a:b + 1], what)
    if stored is not None:
        expect_eq(is_hit(r), stored, "%s a hit (Cache-Status %r)"
                  % (what, r.header("Cache-Status")))
    return r


@cell("P12.ok", "a Range across a block boundary -> 206 byte-exact; the "
      "origin sees one aligned range; the same Range again a hit")
def p12_ok(ctx):
    p = ctx.path("ranges/etag/%s/bytes/%d" % (ctx.tag, SN))
    want = ctx.body(SN)
    range_get(ctx, p, SLICE - 100, SLICE + 100, want, "across blocks")
    expect_eq(slice_ranges(ctx, p), ["bytes=0-%d" % (2 * SLICE - 1)],
              "the origin's ranges")
    range_get(ctx, p, SLICE - 100, SLICE + 100, want, "again", stored=True)


@cell("P12.A3", "the client resets while its slice comes (3 s) -> the "
      "slice fetch goes on and is stored: the same Range again is a "
      "byte-exact hit, no second origin request")
def p12_a3(ctx):
    p = ctx.path("ranges/etag/%s/slow-body/%d/300" % (ctx.tag, SN))
    c = range_client(ctx, p, SLICE + 10, SLICE + 20)
    harness.wait_for(lambda: origin_count(ctx, p) >= 1, 20,
                     what="the slice at the origin")
    time.sleep(0.5)
    expect_eq(bytes(c.buf), b"", "bytes before the slice came")
    c.rst()
    time.sleep(3.5)
    range_get(ctx, p, SLICE + 10, SLICE + 20, ctx.body(SN), "after the reset",
              stored=True)
    expect_eq(slice_ranges(ctx, p), ["bytes=%d-%d" % (SLICE, 2 * SLICE - 1)],
              "the origin's ranges")


@cell("P12.A7", "the origin dies half way through a slice -> the client's "
      "206 is byte-exact (from its own range, asked after the failed "
      "slice) or cut, never complete-looking; the part not stored")
def p12_a7(ctx):
    p = ctx.path("ranges/etag/%s/close-mid-body/%d" % (ctx.tag, SN))
    want = ctx.body(SN)
    c = range_client(ctx, p, 10, 2 * SLICE + 10)
    o = c.read_response(T_OUT + LATE + 10)
    c.close()
    if o.kind == "complete":
        expect_eq(o.status, 206, "status after a failed slice: %r" % o)
        expect_eq(o.resp.header("Content-Range"), "bytes 10-%d/%d"
                  % (2 * SLICE + 10, SN), "Content-Range")
        expect_body(o.resp.body, want[10:2 * SLICE + 11], "the range")
    else:
        expect_cut(o, "a failed slice")
    range_get(ctx, p, 20, 30, want, "the follow-up")
    seen = slice_ranges(ctx, p)
    # (a range over three blocks is streamed: its first block is asked)
    expect_eq(seen[0], "bytes=0-%d" % (SLICE - 1), "the slice asked")


@cell("P12.A13", "the origin answers a slice with a 200 (the whole "
      "object) -> the slice fails (a block is a 206 or nothing), the "
      "client's own range goes to the origin and gets its 200 byte-exact; "
      "that is stored whole (a plain GET is a hit)")
def p12_a13(ctx):
    p = ctx.path("etag/%s/bytes/%d" % (ctx.tag, SN))
    want = ctx.body(SN)
    r = harness.one_request(ctx.port, "GET", p, host=HOST, timeout=60,
                            headers=[("Range", "bytes=%d-%d" % (SLICE - 5, SLICE + 5))])
    expect(r is not None, "the range: no complete response")
    expect_eq((r.status, r.header("Content-Range")), (200, None), "the range")
    expect_body(r.body, want, "the range")
    followup(ctx, p, want, "yes")
    expect_eq(origin_count(ctx, p), 2, "origin requests (the slice's, the client's)")


def _slice_unlike(ctx, etag2, n2):
    """Block 1 comes with another ETag or another complete length than
    block 0: the parts are never combined; the next range over both
    blocks comes from one version."""
    p = "/%s/sliced" % ctx.tag
    a, b = ctx.body(SN, ctx.tag + "-a"), ctx.body(n2, ctx.tag + "-b")

    def part(body, tag, lo, hi):
        return {"status": 206, "body": body[lo:hi + 1], "headers": [
            ["ETag", '"%s"' % tag], ["Cache-Control", "max-age=600"],
            ["Content-Range", "bytes %d-%d/%d" % (lo, hi, len(body))]]}
    ctx.origin.script(p, [part(a, "a", 0, SLICE - 1),
                          part(b, etag2, SLICE, 2 * SLICE - 1),
                          part(b, etag2, 0, 2 * SLICE - 1)])
    range_get(ctx, p, 100, 200, a, "block 0 (version a)")
    range_get(ctx, p, SLICE + 100, SLICE + 200, b, "block 1 (version b)")
    range_get(ctx, p, SLICE - 100, SLICE + 100, b, "across blocks 0-1")
    # The third request may first try to complete the stored block 1
    # with block 0 (an aligned ask for the missing head, If-Range "b");
    # the scripted answer covers another range, so it is never combined
    # and the request goes again as the slice it is.
    seen = slice_ranges(ctx, p)
    tries = ["bytes=0-%d" % (SLICE - 1), "bytes=%d-%d" % (SLICE, 2 * SLICE - 1)]
    expect(seen in (tries + ["bytes=0-%d" % (2 * SLICE - 1)],
                    tries + [tries[0], "bytes=0-%d" % (2 * SLICE - 1)]),
           "the origin's ranges: %r" % seen)
    range_get(ctx, p, SLICE - 100, SLICE + 100, b, "again", stored=True)


@cell("P12.A14a", "block 1's 206 has another strong ETag than block 0's "
      "-> each client byte-exact for its version; never combined: a range "
      "over both blocks is fetched again, all of one version")
def p12_a14a(ctx):
    _slice_unlike(ctx, "b", SN)


@cell("P12.A14b", "block 1's 206 gives another complete length (same "
      "ETag) -> as P12.A14a: never combined")
def p12_a14b(ctx):
    _slice_unlike(ctx, "a", SN + 5000)


# P13: a background fill: the client of a miss leaves; the fill goes on
# when at least background_fill_completed_threshold (0.5) of it came.

BN = 4 << 20
BRATE = 2 << 20         # a 2 s fill
na("P13", ["A1", "A2", "A4"], "the filler's reading is P5's; here it "
   "leaves (A3) at each phase of the fill")
na("P13", ["A5"], "the fill's origin trickles in every P13 cell (2 MiB/s)")
na("P13", ["A8", "A9", "A10"], "as A7 (a failed background fill), P4, P5")


def _bg_leave(ph_at, stored):
    def fn(ctx):
        pre = "delay/1500/" if ph_at is None else ""
        p = ctx.path("%sstream/%d/rate/%d" % (pre, BN, BRATE))
        f = Reader(ctx, p, leave=-1 if ph_at is None else int(BN * ph_at))
        f.start()
        f.finish()
        expect(f.left, "the filler did not leave")
        time.sleep(BN / BRATE + 1.5 + (1.5 if ph_at is None else 0))
        followup(ctx, p, ctx.body(BN), "yes" if stored else "no")
        expect_eq(origin_count(ctx, p), 1 if stored else 2, "origin requests")
    return fn


for _s, _at, _st, _what in (("a", None, False, "before the head"),
                            ("b", 0.2, False, "at 20%"),
                            ("c", 0.7, True, "at 70%"),
                            ("d", 0.95, True, "at 95%")):
    cell("P13.A3" + _s, "the filler resets %s -> %s" % (
        _what, "the fill goes on (over the 0.5 threshold): stored, one "
        "origin request" if _st else "the fill dropped (under the "
        "threshold): nothing stored, the follow-up a miss"))(
            _bg_leave(_at, _st))


def _bg_fault(fault):
    def fn(ctx):
        p = ctx.path("%s/85/stream/%d/rate/%d" % (fault, BN, BRATE))
        f = Reader(ctx, p, leave=int(BN * 0.7))
        f.start()
        f.finish()
        expect(f.left, "the filler did not leave")
        time.sleep(BN / BRATE * 0.3 + (T_OUT + 4 if fault == "stall-at"
                                       else 1))
        followup(ctx, p, ctx.body(BN), "no")
        expect_eq(origin_count(ctx, p), 2, "origin requests")
    return fn


cell("P13.A6", "the filler leaves at 70%, the origin stalls at 85% -> the "
     "background fill cut after transaction_no_activity_timeout_out; "
     "nothing stored")(_bg_fault("stall-at"))
cell("P13.A7", "the filler leaves at 70%, the origin dies at 85% -> "
     "nothing stored")(_bg_fault("die-at"))


@cell("P13.A11", "the filler leaves at 70%, then a reload -> the old "
      "worker finishes the background fill (stored) or drops it (not "
      "stored), never short; it then exits (solo)", solo=True)
def p13_a11(ctx):
    p = ctx.path("stream/%d/rate/%d" % (BN, BRATE))
    old = set(serving_workers(ctx.cistern))
    f = Reader(ctx, p, leave=int(BN * 0.7))
    f.start()
    f.finish()
    ctx.cistern.reload()
    harness.wait_for(lambda: not old & set(harness.children_of(
        ctx.cistern.pid)), T_OUT + LATE, what="the old workers to drain")
    followup(ctx, p, ctx.body(BN), "either")


@cell("P13.A12", "the filler leaves at 70%, then kill -9 of its worker -> "
      "nothing stored; the worker replaced (solo)", solo=True)
def p13_a12(ctx):
    ctx.cistern.expect_log(r"killed by signal 9")
    p = ctx.path("stream/%d/rate/%d" % (BN, BRATE))
    f = Reader(ctx, p, leave=int(BN * 0.7))
    f.start()
    f.finish()
    m = re.search(rb"X-Cistern-Worker: \d+; pid=(\d+)", bytes(f.c.buf))
    expect(m, "no X-Cistern-Worker in the filler's head")
    os.kill(int(m.group(1)), 9)
    harness.wait_for(lambda: len(serving_workers(ctx.cistern)) == 2, 10,
                     what="the killed worker replaced")
    followup(ctx, p, ctx.body(BN), "no")


# ---------------------------------------------------------------------------
# P14: a plugged rule's hit.  plug.test's rule runs headers.so (X-Plug set,
# X-Origin-Conn removed, in the head as it goes out) and cachekey.so (utm=
# is not in the key): each cell stores its object with utm=a and asks with
# another utm=, so its hit is cachekey's doing and its head headers.so's.

na("P14", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "a hit does not touch the origin (a plugged miss is P3-P5's code: the "
   "hooks see only a whole, parsed origin head; test_plugins)")


def plug_path(ctx, directives, utm):
    return ctx.path(directives) + "&utm=" + utm


def plug_preload(ctx, directives, n):
    p = plug_path(ctx, directives, "a")
    for _ in range(2):
        r = harness.one_request(ctx.port, "GET", p, host=PHOST, timeout=60)
        expect(r is not None and r.status == 200, "preload %s: %r" % (p, r))
        expect_body(r.body, ctx.body(n), "preload %s" % p)
    expect(is_hit(r), "preload %s: the second GET was not a hit" % p)


def expect_plugged(o, what="plugged hit"):
    """A whole hit whose head headers.so edited on its way out."""
    expect(is_hit(o.resp), "%s: not a hit (cachekey's key?)" % what)
    expect_eq(o.resp.header("X-Plug"), "edge", "%s: X-Plug (set-resp)" % what)
    expect(o.resp.header("X-Origin-Conn") is None,
           "%s: X-Origin-Conn not removed (rm-resp)" % what)


@cell("P14.A1", "a 20 KiB plugged hit read at 1 KiB/s (20 s, small receive "
      "buffer) -> never cut; byte-exact, its head edited")
def p14_a1(ctx):
    plug_preload(ctx, "bytes/20480", 20480)
    c = ctx.client(rcvbuf=2048)
    c.send(get_req(plug_path(ctx, "bytes/20480", "b"), host=PHOST))
    o = c.read_response(60, rate=SLOW)
    expect_complete(o, ctx.body(20480))
    expect_plugged(o)
    c.close()
    followup(ctx, plug_path(ctx, "bytes/20480", "c"), ctx.body(20480), "yes",
             host=PHOST)


@cell("P14.A2", "half-close after the request -> the whole plugged hit, "
      "its head edited, then the close")
def p14_a2(ctx):
    plug_preload(ctx, "bytes/20000", 20000)
    c = ctx.client()
    c.send(get_req(plug_path(ctx, "bytes/20000", "b"), host=PHOST))
    c.half_close()
    o = c.read_response(T_IN + LATE)
    expect_complete(o, ctx.body(20000))
    expect_plugged(o)
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the hit to a "
           "half-closed request")
    c.close()


def _plug_big(ctx):
    """An 8 MiB plugged hit the client takes 64 KiB of: (client, path)."""
    plug_preload(ctx, "stream/%d" % BIG, BIG)
    c = ctx.client(rcvbuf=4096)
    c.send(get_req(plug_path(ctx, "stream/%d" % BIG, "b"), host=PHOST))
    while len(c.buf) < 65536 and c.recv_some(10, 8192):
        pass
    h = _parse_head(c.buf)
    expect(h is not None, "no head of the 8 MiB plugged hit: %r" % c.outcome())
    expect_eq(h[0].header("X-Plug"), "edge", "X-Plug (set-resp)")
    return c


@cell("P14.A3", "reset mid plugged hit (8 MiB) -> dropped; the object is "
      "still a clean hit through the rule")
def p14_a3(ctx):
    c = _plug_big(ctx)
    c.rst()
    time.sleep(0.5)
    followup(ctx, plug_path(ctx, "stream/%d" % BIG, "c"), ctx.body(BIG),
             "yes", host=PHOST)


@cell("P14.A4", "the client stops reading an 8 MiB plugged hit -> cut after "
      "transaction_no_activity_timeout_in; the object still a clean hit")
def p14_a4(ctx):
    c = _plug_big(ctx)
    time.sleep(T_IN + 6)
    expect_cut(c.read_response(T_IN + LATE), "a plugged hit the client "
               "stopped reading")
    c.close()
    followup(ctx, plug_path(ctx, "stream/%d" % BIG, "c"), ctx.body(BIG),
             "yes", host=PHOST)


# ---------------------------------------------------------------------------
# P15: a plugin's answer.  gen.test's rule is generator.so: /cache/SIZE/ID
# is SIZE bytes of 'x', made as the worker can send them, and stored like
# an origin's answer.

na("P15", ["A5", "A6", "A7", "A8", "A9", "A10"],
   "the plugin is the origin: no origin connection (an intercept that "
   "answers late, in pieces, or not at all is test_plugins')")


def gen_path(ctx, n):
    return "/cache/%d/%s" % (n, ctx.tag)


@cell("P15.A1", "a 20 KiB generated answer read at 1 KiB/s (20 s, small "
      "receive buffer) -> never cut; byte-exact; stored")
def p15_a1(ctx):
    c = ctx.client(rcvbuf=2048)
    c.send(get_req(gen_path(ctx, 20480), host=GHOST))
    o = c.read_response(60, rate=SLOW)
    expect_complete(o, b"x" * 20480)
    c.close()
    followup(ctx, gen_path(ctx, 20480), b"x" * 20480, "yes", host=GHOST)


@cell("P15.A2", "half-close after the request -> the whole generated "
      "answer, then the close; stored")
def p15_a2(ctx):
    c = ctx.client()
    c.send(get_req(gen_path(ctx, 20000), host=GHOST))
    c.half_close()
    o = c.read_response(T_IN + LATE)
    expect_complete(o, b"x" * 20000)
    expect(c.read_until_close(T_KA_IN + LATE), "no close after the answer "
           "to a half-closed request")
    c.close()
    followup(ctx, gen_path(ctx, 20000), b"x" * 20000, "yes", host=GHOST)


def _gen_big(ctx):
    c = ctx.client(rcvbuf=4096)
    c.send(get_req(gen_path(ctx, BIG), host=GHOST))
    while len(c.buf) < 65536 and c.recv_some(10, 8192):
        pass
    expect(_parse_head(c.buf) is not None, "no head of the 8 MiB generated "
           "answer: %r" % c.outcome())
    return c


@cell("P15.A3", "reset mid generated answer (8 MiB) -> dropped; never "
      "stored short (the follow-up byte-exact)")
def p15_a3(ctx):
    c = _gen_big(ctx)
    c.rst()
    time.sleep(0.5)
    followup(ctx, gen_path(ctx, BIG), b"x" * BIG, "either", host=GHOST)


@cell("P15.A4", "the client stops reading an 8 MiB generated answer -> cut "
      "after transaction_no_activity_timeout_in; never stored short")
def p15_a4(ctx):
    c = _gen_big(ctx)
    time.sleep(T_IN + 6)
    expect_cut(c.read_response(T_IN + LATE), "a generated answer the client "
               "stopped reading")
    c.close()
    followup(ctx, gen_path(ctx, BIG), b"x" * BIG, "either", host=GHOST)


@cell("P15.A11", "a reload while an 8 MiB generated answer is read at 1 "
      "MiB/s -> the old worker finishes it byte-exact, then exits; stored "
      "or not, never short (solo)", solo=True)
def p15_a11(ctx):
    p = gen_path(ctx, BIG)
    old = set(serving_workers(ctx.cistern))
    f = Reader(ctx, p, rate=1 << 20, host=GHOST)
    f.start()
    harness.wait_for(lambda: f.got > 1 << 20, 20, what="1 MiB of the answer")
    ctx.cistern.reload()
    o = f.finish()
    expect_complete(o, b"x" * BIG, "the generated answer across the reload")
    harness.wait_for(lambda: not old & set(harness.children_of(
        ctx.cistern.pid)), T_OUT + LATE, what="the old workers to drain")
    followup(ctx, p, b"x" * BIG, "either", host=GHOST)


@cell("P15.A12", "kill -9 of the worker generating an 8 MiB answer (read at "
      "1 MiB/s) -> the client's answer cut, never stored short; the worker "
      "replaced (solo)", solo=True)
def p15_a12(ctx):
    ctx.cistern.expect_log(r"killed by signal 9")
    p = gen_path(ctx, BIG)
    f = Reader(ctx, p, rate=1 << 20, host=GHOST)
    f.start()
    harness.wait_for(lambda: f.got > 1 << 20, 20, what="1 MiB of the answer")
    m = re.search(rb"X-Cistern-Worker: \d+; pid=(\d+)", bytes(f.c.buf))
    expect(m, "no X-Cistern-Worker in the answer's head")
    os.kill(int(m.group(1)), 9)
    expect_cut(f.finish(), "the answer of a killed worker")
    harness.wait_for(lambda: len(serving_workers(ctx.cistern)) == 2, 10,
                     what="the killed worker replaced")
    followup(ctx, p, b"x" * BIG, "either", host=GHOST)


# ---------------------------------------------------------------------------
# P16: an HTTP/2 stream (h2c) waiting on a slow origin when its worker
# reloads or is killed.  A stream's client timers run on its connection's
# timer (worker/h2.c, h2_streams_tick), which the drain after a reload
# takes over; the stream waits on its origin, so none of them may cut it.
# The client's and the origin's faults for a stream are test_h2's (the
# origin transaction is P3-P5's: the stream only owns the request).

H2N = 10000             # the answer: inside the first windows, no
#                         WINDOW_UPDATE needed
H2_WAIT_MS = 3000       # the origin's wait: under T_OUT, past a reload
na("P16", ["A1"], "a stream reads at its window's pace: test_h2 (1 MiB "
   "through 1 KiB windows; a window kept shut reset after "
   "transaction_no_activity_timeout_in)")
na("P16", ["A2"], "a client that closes its side with a stream out of "
   "window: test_review (the connection closed at once)")
na("P16", ["A3"], "RST_STREAM of streams waiting on their origin: "
   "test_h2's rapid reset (and its budget)")
na("P16", ["A4"], "test_h2: a zero-window client closed at "
   "no_activity_timeout_in, a stalled body 408 and a shut window reset "
   "per stream while others keep the connection busy")
na("P16", ["A%d" % i for i in range(5, 11)], "the origin transaction is "
   "P3-P5's (proxy.c); a stream only owns the request "
   "(transaction_active_timeout_in cutting a stream on a slow origin: "
   "test_h2)")


def h2_conn(ctx):
    """An h2c connection (preface and SETTINGS sent), its port counted as
    the cell's."""
    r = h2t.Raw(ctx.h2_port)
    ctx.lports.append(r.s.getsockname()[1])
    return r


def h2_get(r, path):
    r.send(h2t.frame(h2t.HEADERS, 5, 1, h2t.req_block(path, authority=HOST)))


def h2_answer(r, timeout):
    """Stream 1's answer on r: (status bytes or None, body, ended, the
    frames, closed)."""
    def last(f):
        return f[2] == 1 and (f[0] == h2t.RST_STREAM or (
            f[1] & 1 and f[0] in (h2t.HEADERS, h2t.DATA)))
    fr, closed = r.frames(last, timeout)
    heads = [f for f in fr if f[0] == h2t.HEADERS and f[2] == 1]
    body = b"".join(f[3] for f in fr if f[0] == h2t.DATA and f[2] == 1)
    ended = any(f[2] == 1 and f[1] & 1 and f[0] in (h2t.HEADERS, h2t.DATA)
                for f in fr)
    return (h2t._status_bytes(heads[0][3]) if heads else None, body, ended,
            fr, closed)


def expect_h2_complete(r, want, what):
    st, body, ended, fr, _ = h2_answer(r, H2_WAIT_MS / 1000 + LATE)
    expect(st == b"200" and ended, "%s: status %r, END_STREAM %s, frames %r"
           % (what, st, ended, [(f[0], f[1], f[2]) for f in fr]))
    expect_body(body, want, what)
    return fr


@cell("P16.A11", "a reload while an HTTP/2 stream waits 3 s on its origin "
      "-> the stream byte-exact on the old worker (its timers do not cut "
      "it), then GOAWAY NO_ERROR and the close; the worker exits; stored "
      "(solo)", solo=True)
def p16_a11(ctx):
    p = ctx.path("delay/%d/bytes/%d" % (H2_WAIT_MS, H2N))
    old = set(serving_workers(ctx.cistern))
    r = h2_conn(ctx)
    h2_get(r, p)
    harness.wait_for(lambda: origin_count(ctx, p) >= 1, 20,
                     what="the stream at the origin")
    ctx.cistern.reload()
    fr = expect_h2_complete(r, ctx.body(H2N), "the stream across the reload")
    more, closed = r.frames(lambda f: f[0] == h2t.GOAWAY, T_IN + LATE)
    expect_eq(h2t.goaway_code(fr + more), 0, "the drain's GOAWAY")
    expect(r.frames(timeout=5)[1] or closed, "the drained connection left "
           "open")
    r.close()
    harness.wait_for(lambda: not old & set(harness.children_of(
        ctx.cistern.pid)), T_KA_IN + LATE, what="the old workers to drain")
    followup(ctx, p, ctx.body(H2N), "yes")


def _h2_elsewhere(ctx, pid):
    """An h2c connection held by another worker than pid (SO_REUSEPORT
    spreads them by their ports)."""
    for _ in range(64):
        r = h2_conn(ctx)
        lport = r.s.getsockname()[1]
        holder = harness.wait_for(lambda: holder_of(ctx.cistern, lport), 5,
                                  what="a worker to take the connection")
        if holder != pid:
            return r
        r.close()
    fail("64 connections in a row went to worker %d" % pid)


@cell("P16.A12", "kill -9 of the worker while an HTTP/2 stream waits 3 s on "
      "its origin -> that connection closed, the stream never ended; a "
      "stream on the other worker byte-exact; the worker replaced; nothing "
      "stored short (solo)", solo=True)
def p16_a12(ctx):
    ctx.cistern.expect_log(r"killed by signal 9")
    other = ctx.tag + "-other"
    p = ctx.path("delay/%d/bytes/%d" % (H2_WAIT_MS, H2N))
    q = ctx.path("delay/%d/bytes/%d" % (H2_WAIT_MS, H2N), tag=other)
    victim = h2_conn(ctx)
    lport = victim.s.getsockname()[1]
    pid = harness.wait_for(lambda: holder_of(ctx.cistern, lport), 5,
                           what="a worker to take the connection")
    r = _h2_elsewhere(ctx, pid)
    h2_get(victim, p)
    h2_get(r, q)
    harness.wait_for(lambda: origin_count(ctx, p) >= 1
                     and origin_count(ctx, q) >= 1, 20,
                     what="both streams at the origin")
    os.kill(pid, 9)
    st, _, ended, fr, closed = h2_answer(victim, 10)
    expect(closed and not ended, "the killed worker's stream: closed %s, "
           "ended %s, frames %r" % (closed, ended,
                                    [(f[0], f[1], f[2]) for f in fr]))
    victim.close()
    expect_h2_complete(r, ctx.body(H2N, tag=other), "the other worker's "
                       "stream")
    r.close()
    harness.wait_for(lambda: len(serving_workers(ctx.cistern)) == 2, 10,
                     what="the killed worker replaced")
    followup(ctx, p, ctx.body(H2N), "either")
    followup(ctx, q, ctx.body(H2N, tag=other), "yes")


# ---------------------------------------------------------------------------
# Long and slow transfers

MIB = 1 << 20


@cell("L1", "a 20 MiB hit to a reader limited to 1 MiB/s -> complete, "
      "byte-exact", preload=("stream/%d" % HUGE, HUGE))
def l1(ctx):
    p = ctx.path("stream/%d" % HUGE)
    c = ctx.client(timeout=60)
    c.send(get_req(p))
    o = c.read_response(90, rate=MIB)
    expect_complete(o, ctx.body(HUGE), "20 MiB hit")
    expect(is_hit(o.resp), "not a hit")
    c.close()


@cell("L2", "a 20 MiB miss to a reader limited to 1 MiB/s -> complete, "
      "byte-exact; stored")
def l2(ctx):
    p = ctx.path("stream/%d" % HUGE)
    c = ctx.client(timeout=60)
    c.send(get_req(p))
    expect_complete(c.read_response(90, rate=MIB), ctx.body(HUGE),
                    "20 MiB miss")
    c.close()
    followup(ctx, p, ctx.body(HUGE), "yes")


@cell("L3", "a 20 s origin (20 MiB at 1 MiB/s) -> complete, byte-exact; "
      "stored")
def l3(ctx):
    p = ctx.path("stream/%d/rate/%d" % (HUGE, MIB))
    c = ctx.client(timeout=60)
    c.send(get_req(p))
    expect_complete(c.read_response(90), ctx.body(HUGE), "20 s origin")
    c.close()
    followup(ctx, p, ctx.body(HUGE), "yes")


# ---------------------------------------------------------------------------
# Running the cells

def fd_links(pid):
    out = {}
    d = "/proc/%d/fd" % pid
    for fd in os.listdir(d):
        try:
            out[int(fd)] = os.readlink(os.path.join(d, fd))
        except OSError:
            pass
    return out


def tcp_table():
    """socket inode -> (local port, remote port, state) from /proc/net."""
    out = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            f = ln.split()
            out[f[9]] = (int(f[1].rsplit(":", 1)[1], 16),
                         int(f[2].rsplit(":", 1)[1], 16), f[3])
    return out


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE",
              "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}


def holder_of(c, lport):
    """The child of the master holding the other end of our connection
    from local port lport, or None."""
    tcp = tcp_table()
    for pid in harness.children_of(c.pid):
        try:
            links = fd_links(pid)
        except OSError:
            continue        # gone (a killed worker)
        for tgt in links.values():
            m = re.match(r"socket:\[(\d+)\]", tgt)
            if m and tcp.get(m.group(1), (0, 0))[1] == lport:
                return pid
    return None


def worker_pid(c):
    """The one worker: the child of the master holding the other end of a
    connection we keep open (the cache manager is a child too)."""
    with socket.create_connection(("127.0.0.1", c.port), timeout=5) as s:
        s.sendall(b"GET /_stats HTTP/1.1\r\nHost: %s\r\n\r\n"
                  % HOST.encode())
        s.recv(100)             # the worker has accepted it by now
        pid = holder_of(c, s.getsockname()[1])
    if pid is None:
        fail("no child of the master holds our connection")
    return pid


def _preload(port, path, n, tag):
    """Fill the cache with path; it must then be a hit."""
    want = seeded(tag, n)
    for i in range(2):
        r = harness.one_request(port, "GET", path, host=HOST, timeout=60)
        expect(r is not None and r.status == 200,
               "preload %s: %r" % (path, r))
        expect_body(r.body, want, "preload %s" % path)
    expect(is_hit(r), "preload %s: the second GET was not a hit" % path)


def selected():
    rx = os.environ.get("MATRIX_CELLS")
    cells = CELLS
    if rx:
        cells = [c for c in CELLS if re.search(rx, c[0])]
    return cells


def run_cells(cells):
    """Run the cells: the concurrent ones together on one fresh daemon,
    then each solo one on a daemon of its own.  Returns {cid: error text}
    for the failing ones, plus "(daemon)" for problems no cell can be
    blamed for alone."""
    errors = {}
    conc = [e for e in cells if not e[2].solo]
    if conc:
        _run_daemon(conc, errors, 1, _run_on)
    for e in cells:
        if e[2].solo:
            err = {}
            _run_daemon([e], err, 2, _run_solo)
            errors.update(("%s %s" % (k, e[0]) if k.startswith("(") else k, v)
                          for k, v in err.items())
    return errors


def _run_daemon(cells, errors, workers, run):
    with Origin() as o, tun.Server(ws_origin) as ws:
        rec = dict(RECORDS)
        if workers > 1:     # the solo cells find the filling worker
            rec["proxy.config.cistern.debug_headers"] = 1
        c = Cistern(records=rec, storage=STORAGE, workers=workers,
                    ip_allow=IP_ALLOW,
                    remap=["map http://%s/ http://%s/" % (HOST, o.authority),
                           "map http://%s/ http://%s/ %s" % (PHOST, o.authority,
                                                           PLUG_OPTS),
                           "map http://%s/ http://127.0.0.1/ @plugin=generator.so"
                           % GHOST,
                           "map http://%s/ http://127.0.0.1:%d/"
                           % (WS_HOST, ws.port)])
        try:
            run(c, o, ws, cells, errors)
        except (AssertionError, OSError, harness.HarnessError) as e:
            errors["(setup)"] = "%s: %s" % (type(e).__name__, e)
        finally:
            # the teardown checks (error log, sanitizers, exit status)
            c.stop(raise_on_problems=False)
            if c.problems or errors:
                c._failed = True
            if c.problems:
                errors["(daemon)"] = (errors.get("(daemon)", "") + "\n"
                                      + "\n".join(c.problems)).strip()
            kept = c._cleanup()
            if kept and errors:
                errors["(kept)"] = kept


def _run_cell(c, o, ws, entry):
    """(error text or None, seconds) of one cell's function."""
    cid, _, fn, _ = entry
    ctx = Ctx(cid, c, o, ws.port)
    t0 = time.monotonic()
    try:
        fn(ctx)
        return ctx, None, time.monotonic() - t0
    except (AssertionError, OSError, harness.HarnessError) as e:
        return ctx, "%s: %s" % (type(e).__name__, e), time.monotonic() - t0
    except Exception:  # noqa: BLE001
        return ctx, traceback.format_exc(), time.monotonic() - t0
    finally:
        for srv in ctx.servers:
            srv.__exit__(None, None, None)


def _verbose(cid, err, dt):
    if os.environ.get("CISTERN_TEST_VERBOSE"):
        print("    cell %s: %s (%.1fs)" % (cid, "ok" if not err else "FAIL",
                                          dt))


def _run_solo(c, o, ws, cells, errors):
    """One solo cell (a reload, a kill -9) on its own daemon: then every
    worker is alive (the configured two) and none holds more fds than the
    most any held at the start."""
    harness.one_request(c.port, "GET", "/warm/bytes/10", host=HOST)
    time.sleep(T_KA_OUT + 2.5)
    base = max(len(fd_links(p)) for p in serving_workers(c))
    ctx, err, dt = _run_cell(c, o, ws, cells[0])
    _verbose(cells[0][0], err, dt)
    if err:
        errors[cells[0][0]] = err

    def settled():
        pids = serving_workers(c)
        return len(pids) == 2 and all(
            os.path.exists("/proc/%d" % p) and len(fd_links(p)) <= base
            for p in pids)
    try:
        harness.wait_for(settled, timeout=15, what="the workers' fds")
    except TestFailure:
        pids = serving_workers(c)
        errors["(fds)"] = "workers %s with fds %s (at most %d at the start)" % (
            pids, [len(fd_links(p)) for p in pids], base)
        errors.setdefault(cells[0][0], "leaked an fd of a worker")


def _run_on(c, o, ws, cells, errors):
    wpid = worker_pid(c)
    # Warm up (the cache, the pools, the log files), then the baseline.
    for cid, _, _, pre in cells:
        if pre:
            tag = cid.replace(".", "-")
            _preload(c.port, "/%s/once/seed/%s/%s/%s" % (tag, tag, pre[0],
                                                         CC), pre[1], tag)
    harness.one_request(c.port, "GET", "/warm/bytes/10", host=HOST)
    time.sleep(T_KA_OUT + 2.5)          # pooled origin connections go
    base = fd_links(wpid)
    ctxs = {}

    def one(entry):
        ctx, err, dt = _run_cell(c, o, ws, entry)
        ctxs[entry[0]] = ctx
        return entry[0], err, dt

    with concurrent.futures.ThreadPoolExecutor(len(cells)) as ex:
        for cid, err, dt in ex.map(one, cells):
            _verbose(cid, err, dt)
            if err:
                errors[cid] = err
    # No worker died...
    now = worker_pid(c)
    if now != wpid or not os.path.exists("/proc/%d" % wpid):
        errors["(daemon)"] = "the worker %d died during the cells (the "\
            "worker is now %r)" % (wpid, now)
        return
    # ...and its fds are back at the baseline (connections linger up to 2 s
    # after a close; pooled origin connections go after T_KA_OUT).
    def settled():
        return len(fd_links(wpid)) <= len(base)
    try:
        harness.wait_for(settled, timeout=15, what="the worker's fds")
    except TestFailure:
        links = fd_links(wpid)
        tcp = tcp_table()
        owner = {}
        by_tag = {ctx.tag: cid for cid, ctx in ctxs.items()}
        for cid, ctx in ctxs.items():
            for lp in ctx.lports:
                owner[lp] = cid
        # the origin knows which of its clients (our origin sockets) asked
        # for which path
        for rec in o.requests():
            m = re.match(r"/([A-Za-z0-9-]+?)(-probe)?/", rec["target"])
            if m and m.group(1) in by_tag:
                owner.setdefault(rec["client"][1], by_tag[m.group(1)])
        lines = []
        blamed = set()
        for fd, tgt in sorted(links.items()):
            if base.get(fd) == tgt:
                continue
            m = re.match(r"socket:\[(\d+)\]", tgt)
            info = tcp.get(m.group(1)) if m else None
            who = "?"
            if info:
                lp, rp, st = info
                who = owner.get(rp) or owner.get(lp) or "?"
                desc = "tcp %d->%d %s" % (lp, rp, TCP_STATES.get(st, st))
            else:
                desc = tgt
            lines.append("fd %d: %s (cell %s)" % (fd, desc, who))
            blamed.add(who)
        msg = "the worker has %d fds, %d at the start:\n      %s" % (
            len(links), len(base), "\n      ".join(lines))
        errors["(fds)"] = msg
        for who in blamed:
            if who in ctxs:
                errors.setdefault(who, "leaked an fd of the worker")


@harness.timeout(900)
def test_matrix():
    cells = selected()
    if not cells:
        raise harness.SkipTest("no cell matches MATRIX_CELLS")
    errors = run_cells(cells)
    if not errors:
        return
    report = ["%d of %d cells failed in the concurrent run: %s" % (
        len([k for k in errors if not k.startswith("(")]), len(cells),
        " ".join(sorted(k for k in errors if not k.startswith("("))))]
    for k in sorted(errors):
        report.append("%s: %s" % (k, errors[k].replace("\n", "\n      ")))
    failing = [e for e in cells if e[0] in errors]
    if len(cells) > 1 and not os.environ.get("MATRIX_NO_ISOLATE"):
        if "(daemon)" in errors or "(fds)" in errors:
            failing = cells
        report.append("each failing cell again, alone on a fresh daemon "
                      "(the reproduction: MATRIX_CELLS='^CELL$'):")
        for e in failing:
            iso = run_cells([e])
            iso.pop("(kept)", None)
            if not iso:
                report.append("%s alone: PASS" % e[0])
                continue
            for k in sorted(iso):
                report.append("%s alone: %s%s" % (
                    e[0], "" if k == e[0] else k + " ",
                    iso[k].replace("\n", "\n      ")))
    fail("\n    ".join(report))


def table():
    """The markdown table of t/README.md, from the cells."""
    by = {}
    control = {}        # a phase's cell with no adversity ("P0.ok")
    for cid, exp, _, _ in CELLS:
        m = re.match(r"(P\d+)\.(A\d+)", cid)
        if m:
            by.setdefault((m.group(1), m.group(2)), []).append((cid, exp))
        elif re.match(r"P\d+\.", cid):
            control.setdefault(cid.split(".")[0], []).append((cid, exp))
    out = ["| phase | adversity | cell | expected outcome |",
           "|---|---|---|---|"]
    for p, pn in PHASES:
        for cid, exp in control.get(p, []):
            out.append("| %s | none (the control) | %s | %s |"
                       % (pn, cid, exp))
        for a, an in ADVERSITIES:
            if a not in ADVS_OF[p]:
                continue
            if (p, a) in by:
                for cid, exp in by[(p, a)]:
                    out.append("| %s | %s | %s | %s |" % (pn, an, cid, exp))
            else:
                out.append("| %s | %s | n/a | %s |" % (
                    pn, an, NA.get((p, a), "MISSING")))
    for cid, exp, _, _ in CELLS:
        if cid.startswith("L"):
            out.append("| long and slow | | %s | %s |" % (cid, exp))
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:] == ["--table"]:
        print(table())
        sys.exit(0)
    harness.main()
