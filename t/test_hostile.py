#!/usr/bin/env python3
"""t/test_hostile.py: hostile clients (issue 11, Hardening).

- Request smuggling: every framing trick (CL.TE, TE.CL, TE.TE
  obfuscations, bad or duplicate Content-Length, chunk-size overflow, bare
  CR/LF in chunk lines, NUL bytes, malformed request lines and field names)
  is sent with a second request hidden behind it.  Each must be answered
  with one 400 (or 501) and a close, and the origin must never see the
  hidden request (it may see at most the one legitimate request, when the
  framing problem is in a body that was already being forwarded).
- An absolute-form target wins over Host for remap and the cache key.
- Slowloris on 200 sockets while a normal client keeps getting answers.
- 10,000 idle connections: memory per idle connection (RssAnon growth over
  every Cistern process / connections), printed and bounded.
- proxy.config.net.connections_throttle: a clean refusal past the limit.
- The HTTP/1.1 review of 2026-12-03, against raw-socket origins that keep
  the bytes they were sent: chunk extensions by their grammar both ways, a
  101 only to a protocol the client asked for, Vary's absent field apart
  from an empty one, and no pooled connection behind a body its method
  gives no meaning (CL.0).
- Left open by those reviews: Content-Length forwarded as its decimal
  value both ways, the trailer fields a recipient may not merge dropped
  both ways, and no pooled connection behind an answer that came before
  the POST body it answered was sent.
"""
import json
import resource
import socket
import threading
import time

import harness
from harness import Cistern, Origin, Conn, raw, expect, expect_eq, fail

HIDDEN = b"GET /smuggled HTTP/1.1\r\nHost: m.test\r\n\r\n"


def _statuses(data):
    """Status codes of the responses in data (status lines at the start of
    the data or after a blank line; bodies of our error pages are short
    text without status lines)."""
    out = []
    for part in data.split(b"\r\n\r\n"):
        i = part.find(b"HTTP/1.")
        if i == 0 or (i > 0 and part[:i].strip() == b""):
            try:
                out.append(int(part[i + 9:i + 12]))
            except ValueError:
                pass
    return out


def _hidden_seen(reqs):
    return [r for r in reqs if "smuggled" in r.get("target", "")
            or "smuggled" in r.get("path", "")]


# (name, bytes sent, accepted statuses, origin may see the legitimate one)
H = "POST /a HTTP/1.1\r\nHost: m.test\r\n"
SMUGGLING = [
    ("CL.TE", (H + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n"
               "0\r\n\r\nG").encode() + HIDDEN, (400,), False),
    ("TE.CL", (H + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
               "%x\r\n" % len(HIDDEN)).encode() + HIDDEN + b"\r\n0\r\n\r\n",
     (400,), False),
    ("TE xchunked + CL", (H + "Content-Length: 5\r\nTransfer-Encoding: xchunked"
                          "\r\n\r\n0\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("TE xchunked alone", (H + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n"
                           ).encode() + HIDDEN, (400,), False),
    ("TE folded name ( Transfer-Encoding)", (H + "Content-Length: 5\r\n"
                                             " Transfer-Encoding: chunked\r\n\r\n"
                                             "0\r\n\r\n").encode() + HIDDEN,
     (400,), False),
    ("TE value with leading space + CL", (H + "Content-Length: 5\r\n"
                                          "Transfer-Encoding:  chunked\r\n\r\n"
                                          "0\r\n\r\n").encode() + HIDDEN,
     (400,), False),
    ("TE 'chunked <tab>' + CL", (H + "Content-Length: 5\r\n"
                                 "Transfer-Encoding: chunked \t\r\n\r\n"
                                 "0\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("TE:<tab>chunked + CL", (H + "Content-Length: 5\r\n"
                              "Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n"
                              ).encode() + HIDDEN, (400,), False),
    ("TE space before colon", (H + "Transfer-Encoding : chunked\r\n\r\n"
                               "0\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("duplicate TE lines", (H + "Transfer-Encoding: chunked\r\n"
                            "Transfer-Encoding: identity\r\n\r\n0\r\n\r\n"
                            ).encode() + HIDDEN, (400,), False),
    ("TE chunked, identity", (H + "Transfer-Encoding: chunked, identity\r\n\r\n"
                              "0\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("TE chunked twice", (H + "Transfer-Encoding: chunked\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                          ).encode() + HIDDEN, (400,), False),
    ("TE in HTTP/1.0", ("POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "0\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("differing Content-Length", (H + "Content-Length: 0\r\n"
                                  "Content-Length: %d\r\n\r\n" % len(HIDDEN)
                                  ).encode() + HIDDEN, (400,), False),
    ("Content-Length list that differs", (H + "Content-Length: 0, %d\r\n\r\n"
                                          % len(HIDDEN)).encode() + HIDDEN,
     (400,), False),
    ("Content-Length: +5", (H + "Content-Length: +5\r\n\r\nhello").encode()
     + HIDDEN, (400,), False),
    ("Content-Length: 0x10", (H + "Content-Length: 0x10\r\n\r\n0123456789abcdef"
                              ).encode() + HIDDEN, (400,), False),
    ("Content-Length: -1", (H + "Content-Length: -1\r\n\r\n").encode() + HIDDEN,
     (400,), False),
    ("Content-Length 2^64+5", (H + "Content-Length: 18446744073709551621\r\n\r\n"
                               "hello").encode() + HIDDEN, (400,), False),
    ("chunk-size overflow", (H + "Transfer-Encoding: chunked\r\n\r\n"
                             "ffffffffffffffffff\r\nhello\r\n0\r\n\r\n"
                             ).encode() + HIDDEN, (400,), True),
    ("chunk-size 2^64+5 in hex", (H + "Transfer-Encoding: chunked\r\n\r\n"
                                  "10000000000000005\r\nhello\r\n0\r\n\r\n"
                                  ).encode() + HIDDEN, (400,), True),
    ("chunk extension with bare LF", (H + "Transfer-Encoding: chunked\r\n\r\n"
                                      "2;a\nxx\r\n0\r\n\r\n").encode() + HIDDEN
     + b"\r\n0\r\n\r\n", (400,), True),
    ("chunk extension with bare CR", (H + "Transfer-Encoding: chunked\r\n\r\n"
                                      "2;a\rxx\r\n0\r\n\r\n").encode() + HIDDEN,
     (400,), True),
    ("chunk data not followed by CRLF", (H + "Transfer-Encoding: chunked\r\n\r\n"
                                         "2\r\nxxYY0\r\n\r\n").encode() + HIDDEN,
     (400,), True),
    ("NUL byte in a field value", (H + "Content-Length: 0\r\nX-A: a\x00b\r\n\r\n"
                                   ).encode() + HIDDEN, (400,), False),
    ("NUL byte in a field name", (H + "Content-Length: 0\r\nX\x00A: b\r\n\r\n"
                                  ).encode() + HIDDEN, (400,), False),
    ("request line with two spaces", b"GET  /a HTTP/1.1\r\nHost: m.test\r\n\r\n"
     + HIDDEN, (400,), False),
    ("request line with a tab", b"GET\t/a HTTP/1.1\r\nHost: m.test\r\n\r\n"
     + HIDDEN, (400,), False),
    ("field name with '(' ", (H + "Content-Length: 0\r\nX(a): b\r\n\r\n"
                              ).encode() + HIDDEN, (400,), False),
    ("field name with '/'", (H + "Content-Length: 0\r\nX/a: b\r\n\r\n"
                             ).encode() + HIDDEN, (400,), False),
    ("field name with a space", (H + "Content-Length: 0\r\nX a: b\r\n\r\n"
                                 ).encode() + HIDDEN, (400,), False),
    ("obs-fold continuation", (H + "Content-Length: 0\r\nX-A: a\r\n b\r\n\r\n"
                               ).encode() + HIDDEN, (400,), False),
    ("bare CR in a field", (H + "Content-Length: 0\r\nX-A: a\rContent-Length: 5"
                            "\r\n\r\n").encode() + HIDDEN, (400,), False),
    ("duplicate Host", b"GET /a HTTP/1.1\r\nHost: m.test\r\nHost: evil.test\r\n\r\n"
     + HIDDEN, (400,), False),
]


def test_smuggling():
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=1) as c:
        with harness.Collector() as col:
            _smuggling_cases(c, o, col)


def _smuggling_cases(c, o, col):
    if True:
        for name, data, statuses, may_forward in SMUGGLING:
            with col.case(name):
                o.reset()
                got, closed = raw(c.port, data, timeout=3)
                st = _statuses(got)
                expect(st and st[0] in statuses,
                       "%s: want one of %s, got %r" % (name, statuses,
                                                       got[:200]))
                expect_eq(len(st), 1, "%s: responses (%r)" % (name, got[:300]))
                expect(closed, "%s: connection left open" % name)
                reqs = o.requests()
                expect(not _hidden_seen(reqs),
                       "%s: the hidden request reached the origin: %r"
                       % (name, reqs))
                expect(len(reqs) <= (1 if may_forward else 0),
                       "%s: origin saw %d requests: %r"
                       % (name, len(reqs), [r["target"] for r in reqs]))
        # The daemon is still healthy and serves a plain request.
        with col.case("still serving"):
            got, _ = raw(c.port, b"GET /bytes/3 HTTP/1.1\r\nHost: m.test\r\n"
                         b"Connection: close\r\n\r\n")
            expect_eq(_statuses(got), [200], "plain request after the attacks")


def test_te_final_coding_not_chunked_400():
    """RFC 9112 6.3 item 4: a request with Transfer-Encoding whose final
    coding is not chunked has no knowable length: 400, then close (it got
    501).  A coding we do not implement before a final chunked may stay
    501, also closed.  Nothing reaches the origin, and what follows on the
    connection is never read as a request."""
    cases = [
        ("gzip", b"Transfer-Encoding: gzip\r\n", 400),
        ("GZIP, deflate", b"Transfer-Encoding: GZIP, deflate\r\n", 400),
        ("identity", b"Transfer-Encoding: identity\r\n", 400),
        ("chunked line then gzip line",
         b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", 400),
        ("gzip, chunked", b"Transfer-Encoding: gzip, chunked\r\n", 501),
    ]
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=1) as c, harness.Collector() as col:
        for name, te, want in cases:
            with col.case(name):
                o.reset()
                data = (b"POST /te HTTP/1.1\r\nHost: m.test\r\n" + te
                        + b"\r\n0\r\n\r\n" + HIDDEN)
                got, closed = raw(c.port, data, timeout=5)
                st = _statuses(got)
                expect_eq(st, [want], "%s: statuses (%r)" % (name, got[:200]))
                expect(closed, "%s: connection left open" % name)
                expect_eq(o.requests(), [], "%s: the origin saw" % name)
        with col.case("control: chunked alone is forwarded"):
            o.reset()
            got, _ = raw(c.port, b"POST /te HTTP/1.1\r\nHost: m.test\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n"
                         b"\r\n3\r\nabc\r\n0\r\n\r\n", timeout=5)
            expect_eq(_statuses(got), [200], "chunked POST")
            expect_eq(len(o.requests()), 1, "origin requests")


def test_lf_only_lines_do_not_desync():
    # Bare LF line endings are accepted by RFC 9112 2.2; mixed with CRLF
    # they must still frame exactly one request: the origin sees /a with
    # the body it was given, never the hidden request.
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=1) as c:
        data = (b"POST /a HTTP/1.1\nHost: m.test\r\nContent-Length: 5\n"
                b"Connection: close\r\n\nhello" + HIDDEN)
        got, closed = raw(c.port, data, timeout=3)
        st = _statuses(got)
        expect(st and st[0] in (200, 400), "status: %r" % got[:200])
        expect_eq(len(st), 1, "responses")
        reqs = o.requests()
        expect(not _hidden_seen(reqs), "hidden request reached the origin")
        expect(len(reqs) <= 1, "origin saw %d requests" % len(reqs))
        if reqs:
            expect_eq(reqs[0]["body"], "hello", "forwarded body")


def test_absolute_target_wins_over_host():
    # GET http://other.test/x with Host: m.test is remapped by other.test
    # and cached under other.test: a later GET /x for m.test must reach
    # m.test's origin, never be served other.test's object.
    path = "/headers?Cache-Control=max-age%3D600&X-Which=other"
    with Origin() as a, Origin() as b, Cistern(
            remap=["map http://m.test/ http://%s/" % a.authority,
                   "map http://other.test/ http://%s/" % b.authority],
            storage=["cache 64M"]) as c:
        got, _ = raw(c.port, ("GET http://other.test%s HTTP/1.1\r\n"
                              "Host: m.test\r\nConnection: close\r\n\r\n"
                              % path).encode())
        expect_eq(_statuses(got), [200], "absolute-form request")
        expect_eq(len(b.requests()), 1, "other.test's origin requests")
        expect_eq(len(a.requests()), 0, "m.test's origin requests")
        got, _ = raw(c.port, ("GET %s HTTP/1.1\r\nHost: m.test\r\n"
                              "Connection: close\r\n\r\n" % path).encode())
        expect_eq(_statuses(got), [200], "origin-form request")
        expect_eq(len(a.requests()), 1,
                  "m.test's origin must be asked (not served other.test's "
                  "object from cache)")
        # and the absolute form is a hit for other.test's key
        got, _ = raw(c.port, ("GET http://other.test%s HTTP/1.1\r\n"
                              "Host: m.test\r\nConnection: close\r\n\r\n"
                              % path).encode())
        expect_eq(len(b.requests()), 1, "other.test's object served from cache")


def test_response_te_gzip_chunked_framing():
    # Bug 3 (fuzz_response): "Transfer-Encoding: gzip, chunked" from an
    # origin was close-delimited for Cistern but chunked for http-parser:
    # the miss forwarded raw chunk framing as the body while the cache
    # stored the de-chunked bytes.  Cistern cannot undo gzip: 502, or
    # else one consistent body on miss and hit.
    import base64
    body = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"
            b"Cache-Control: max-age=60\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority],
            storage=["cache 64M"]) as c:
        o.script("/te", [{"raw_b64": base64.b64encode(body).decode()}])
        got = []
        for _ in range(2):
            data, _ = raw(c.port, b"GET /te HTTP/1.1\r\nHost: m.test\r\n"
                          b"Connection: close\r\n\r\n", timeout=3)
            got.append(data)
        st = _statuses(got[0])
        expect(st and st[0] in (200, 502), "status: %r" % got[0][:200])
        if st[0] == 200:
            b0 = got[0].split(b"\r\n\r\n", 1)[1]
            b1 = got[1].split(b"\r\n\r\n", 1)[1]
            expect(b"\r\n0\r\n" not in b0 and b"5\r\nhello" not in b0,
                   "chunk framing forwarded as the body: %r" % b0)
            expect_eq(b0, b1, "body on miss vs hit")


@harness.timeout(60)
def test_slowloris():
    with Origin() as o, Cistern(
            records={"proxy.config.cistern.request_header_timeout": 2},
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=1) as c:
        prefix = b"GET /bytes/10 HTTP/1.1\r\nHost: m.test\r\nX-Slow: "
        socks = []
        for _ in range(200):
            s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
            s.setblocking(False)
            socks.append(s)
        stop = threading.Event()
        closed_by_peer = set()

        def drip():
            i = 0
            while not stop.is_set():
                for k, s in enumerate(socks):
                    if k in closed_by_peer:
                        continue
                    try:
                        s.send(prefix[i:i + 1] if i < len(prefix) else b"a")
                        try:
                            if s.recv(4096) == b"":
                                closed_by_peer.add(k)
                        except BlockingIOError:
                            pass
                    except OSError:
                        closed_by_peer.add(k)
                i += 1
                stop.wait(0.5)
        t = threading.Thread(target=drip, daemon=True)
        t.start()
        worst = 0.0
        try:
            deadline = time.monotonic() + 5
            n = 0
            while time.monotonic() < deadline:
                t0 = time.monotonic()
                got, _ = raw(c.port, b"GET /bytes/10 HTTP/1.1\r\nHost: m.test\r\n"
                             b"Connection: close\r\n\r\n", timeout=2)
                dt = time.monotonic() - t0
                worst = max(worst, dt)
                expect_eq(_statuses(got), [200], "normal client during slowloris")
                n += 1
                time.sleep(0.1)
        finally:
            stop.set()
            t.join(2)
        print("slowloris: %d normal requests, slowest %.3f s, %d/200 drippers "
              "cut off by the header timeout" % (n, worst, len(closed_by_peer)))
        expect(worst < 1.0, "a normal request took %.2f s" % worst)
        expect(len(closed_by_peer) >= 190,
               "request_header_timeout cut off only %d of 200 drippers in 5 s"
               % len(closed_by_peer))
        for s in socks:
            s.close()
        c.expect_log(r"timeout|timed out")


def _raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < want:
        raise harness.SkipTest("RLIMIT_NOFILE hard limit %d < %d" % (hard, want))
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


@harness.timeout(90)
def test_idle_connections_memory():
    n_conns = 10000
    _raise_nofile(n_conns + 1000)   # the daemon inherits it
    with Origin() as o, Cistern(
            records={"proxy.config.cistern.request_header_timeout": 120,
                     "proxy.config.http.keep_alive_no_activity_timeout_in": 120,
                     "proxy.config.http.transaction_no_activity_timeout_in": 120},
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=2) as c:
        # warm up: one request per worker's code paths
        for _ in range(4):
            got, _ = raw(c.port, b"GET /bytes/10 HTTP/1.1\r\nHost: m.test\r\n"
                         b"Connection: close\r\n\r\n")
        time.sleep(0.3)
        before = c.rss_anon()
        socks = []
        try:
            for i in range(n_conns):
                s = socket.socket()
                s.settimeout(10)
                s.connect(("127.0.0.1", c.port))
                socks.append(s)

            def settled():
                # every connection accepted: RssAnon stops moving
                a = c.rss_anon()
                time.sleep(0.5)
                b = c.rss_anon()
                return b if abs(b - a) < 64 * 1024 else None
            after = harness.wait_for(settled, 20, what="RssAnon to settle")
            per = (after - before) / n_conns
            print("idle connections: %d, RssAnon %d -> %d KiB over %d processes: "
                  "%.0f bytes per idle connection"
                  % (n_conns, before // 1024, after // 1024, len(c.pids()), per))
            # still serving while they sit there
            t0 = time.monotonic()
            got, _ = raw(c.port, b"GET /bytes/10 HTTP/1.1\r\nHost: m.test\r\n"
                         b"Connection: close\r\n\r\n")
            expect_eq(_statuses(got), [200], "request with 10,000 idle connections")
            expect(time.monotonic() - t0 < 1.0, "slow answer with idle connections")
            # none of them was refused or closed
            sample = socks[::500]
            for s in sample:
                s.setblocking(False)
                try:
                    d = s.recv(1)
                    fail("idle connection got %r" % d)
                except BlockingIOError:
                    pass
            expect(per < 2048, "%.0f bytes per idle connection (limit 2 KiB)" % per)
        finally:
            for s in socks:
                s.close()


def test_connections_throttle():
    with Origin() as o, Cistern(
            records={"proxy.config.net.connections_throttle": 10},
            remap=["map http://m.test/ http://%s/" % o.authority],
            workers=1) as c:
        req = b"GET /bytes/5 HTTP/1.1\r\nHost: m.test\r\n\r\n"

        # The harness's readiness probes must be gone first: they count too.
        def quiet():
            r = harness.curl([c.url("/_stats")])
            n = json.loads(r.body)["global"]["proxy.process.http.current_client_connections"]
            return int(n) <= 1      # this request itself
        harness.wait_for(quiet, 10, what="no other client connection")
        time.sleep(0.2)             # the /_stats connection itself closes
        conns = [Conn(c.port) for _ in range(10)]
        for k in conns:
            expect_eq(k.request(req).status, 200, "one of the first 10")
        # the 11th: a 503 or a plain close, never a hang
        s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
        try:
            s.sendall(req)
        except OSError:
            pass
        data = b""
        try:
            while True:
                d = s.recv(4096)
                if not d:
                    break
                data += d
        except ConnectionResetError:
            pass
        except socket.timeout:
            fail("the 11th connection was neither refused nor closed: %r" % data)
        s.close()
        st = _statuses(data)
        expect(st in ([], [503]), "11th connection got %r" % data[:200])
        # the first 10 still work
        for k in conns:
            expect_eq(k.request(req).status, 200, "first 10 after the refusal")
        # a slot freed is a slot usable again
        conns[0].close()
        k = harness.wait_for(lambda: _try_conn(c.port, req), 5,
                             what="a new connection after one closed")
        k.close()
        for k in conns[1:]:
            k.close()


def _try_conn(port, req):
    k = Conn(port)
    try:
        if k.request(req).status == 200:
            return k
    except (AssertionError, OSError):
        pass
    k.close()
    return None



# ---------------------------------------------------------------------------
# HTTP/1.1 review of 2026-12-03 (framing both ways, caching)

class _RawOrigin:
    """A raw-socket origin: keeps every byte each connection sent (the
    request as forwarded, framing and all) and answers each request head
    with answer(target) (bytes, or a list of pieces sent one by one),
    then closes when close_after is set.  blanks=2: the answer waits for
    a second blank line (the end of a chunked body's trailers)."""

    def __init__(self, answer, close_after=True, blanks=1):
        self.answer, self.close_after, self.blanks = answer, close_after, blanks
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(16)
        self.port = self.ls.getsockname()[1]
        self.got = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            rec = bytearray()
            self.got.append(rec)
            threading.Thread(target=self._serve, args=(s, rec), daemon=True).start()

    def _serve(self, s, rec):
        s.settimeout(10)
        try:
            while rec.count(b"\r\n\r\n") < self.blanks:
                d = s.recv(65536)
                if not d:
                    return
                rec += d
            answer = self.answer(bytes(rec).split(b" ")[1])
            # a list goes out piece by piece, each its own read at the proxy
            for piece in answer if isinstance(answer, list) else [answer]:
                s.sendall(piece)
                if isinstance(answer, list):
                    time.sleep(0.01)
            # the rest of what the proxy sends (a request body) is kept too
            while not self.close_after:
                d = s.recv(65536)
                if not d:
                    return
                rec += d
            time.sleep(0.3)     # whatever the proxy still sends is recorded
            s.setblocking(False)
            try:
                rec += s.recv(65536)
            except OSError:
                pass
        except OSError:
            pass
        finally:
            s.close()

    def seen(self):
        return b"".join(bytes(r) for r in self.got)

    def close(self):
        self.ls.close()


def test_chunk_extension_outside_the_grammar_is_refused():
    """RFC 9112 7.1.1: chunk-ext is `;` name [`=` token / quoted-string]
    (BWS around both).  Anything without a control byte was taken as an
    extension and forwarded byte for byte: an unterminated quoted string
    (`1;a="` then CRLF), a space inside a name, an empty name or value,
    bytes after the closing quote.  A recipient that reads a quoted
    string as the grammar says takes the CRLF inside it for part of the
    extension and frames the rest of the stream its own way -- on a
    pooled origin connection, into the next client's request.  Now each
    is a 400 and a close, and the origin never sees the line; an origin's
    chunked answer with one is cut and not stored.  Extensions that follow
    the grammar (quoted `;` and `\\"` inside, BWS) still pass."""
    bad = [b'1;a="\r\nX\r\n0\r\n\r\n', b'1;a="x\r\nX\r\n0\r\n\r\n',
           b"1;a b\r\nX\r\n0\r\n\r\n", b"1;\r\nX\r\n0\r\n\r\n",
           b"1;=b\r\nX\r\n0\r\n\r\n", b"1;a=\r\nX\r\n0\r\n\r\n",
           b'1;a="x"y\r\nX\r\n0\r\n\r\n', b"1;a=b=c\r\nX\r\n0\r\n\r\n",
           b"1;a=(b)\r\nX\r\n0\r\n\r\n", b'1;a="\\\r\nX\r\n0\r\n\r\n']
    good = [b"1;a\r\nX\r\n0\r\n\r\n", b"1;a=b;c\r\nX\r\n0\r\n\r\n",
            b'1 ; a = "x;\\"y, z" ; b=c\r\nX\r\n0;last=1\r\n\r\n']
    ok = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    o = _RawOrigin(lambda t: ok, close_after=False)
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1) as c, harness.Collector() as col:
            for body in bad + good:
                with col.case(repr(body)):
                    o.got.clear()
                    # (a good one closes: nothing to wait for behind it)
                    close = b"Connection: close\r\n" if body in good else b""
                    got, closed = raw(c.port, b"POST /ext HTTP/1.1\r\nHost: m.test\r\n"
                                      b"Transfer-Encoding: chunked\r\n" + close + b"\r\n"
                                      + body + HIDDEN, timeout=3)
                    line = body.split(b"\r\n")[0]
                    if body in good:
                        expect_eq(_statuses(got)[:1], [200], "status")
                        expect(line in o.seen(), "line not forwarded: %r" % o.seen())
                        continue
                    expect_eq(_statuses(got), [400], "statuses (%r)" % got[:200])
                    expect(closed, "connection left open")
                    expect(line not in o.seen(), "the origin saw %r" % o.seen())
                    expect(b"smuggled" not in o.seen(), "the hidden request went on")
    finally:
        o.close()


def test_origin_chunk_extension_outside_the_grammar_is_not_passed_on():
    """The same rule for an origin's chunked answer, which an HTTP/1.1
    client got framing and all: `2;a="` then CRLF went to the client as
    it was, and the answer was stored.  Now the client is cut before the
    line and nothing is stored (the second request asks the origin)."""
    cached = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
              b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
              b'2;a="\r\nok\r\n0\r\n\r\n')
    o = _RawOrigin(lambda t: cached)
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1, storage=["cache 64M"]) as c:
            for n in (1, 2):
                got, closed = raw(c.port, b"GET /ext HTTP/1.1\r\nHost: m.test\r\n\r\n",
                                  timeout=3)
                expect(b'a="' not in got, "the extension reached the client: %r" % got)
                expect(closed, "connection left open")
                expect_eq(len(o.got), n, "origin requests (the answer was stored)")
            c.expect_log(r"bad response body framing|chunk extension")
    finally:
        o.close()


def test_101_names_a_protocol_the_client_asked_for():
    """RFC 9110 7.8: a 101 MUST carry Upgrade, naming only protocols the
    client's Upgrade listed.  Any 101 to a forwarded Upgrade became a
    tunnel to the origin, with or without it: an origin path that echoes a
    status (or a confused server) turns the connection into a raw pipe to
    the origin past remap and its filters (WebSocket smuggling).  Now a
    101 without Upgrade, or naming another protocol, is a 502 and the
    connection is no tunnel; one naming the client's protocol (any case,
    one of several asked) still switches."""
    heads = {
        b"/none": b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n",
        b"/other": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\n"
                   b"Connection: upgrade\r\n\r\n",
        b"/more": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket, foo\r\n"
                  b"Connection: upgrade\r\n\r\n",
        b"/empty": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade:\r\n"
                   b"Connection: upgrade\r\n\r\n",
        b"/ok": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: WebSocket\r\n"
                b"Connection: upgrade\r\n\r\n",
    }
    o = _RawOrigin(lambda t: heads[t] + b"RAW")
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1) as c, harness.Collector() as col:
            for path, want in ((b"/none", 502), (b"/other", 502), (b"/more", 502),
                               (b"/empty", 502), (b"/ok", 101)):
                with col.case(path.decode()):
                    got, _ = raw(c.port, b"GET " + path + b" HTTP/1.1\r\nHost: m.test\r\n"
                                 b"Upgrade: websocket, bar/2\r\nConnection: upgrade\r\n"
                                 b"\r\n", timeout=1)
                    expect_eq(_statuses(got)[:1], [want], "status (%r)" % got[:200])
                    expect_eq(got.endswith(b"RAW"), want == 101, "tunnelled (%r)" % got)
            c.expect_log(r"101 Switching Protocols")
    finally:
        o.close()


def test_vary_absent_field_does_not_match_an_empty_one():
    """RFC 9111 4.1: a field absent from the request that was stored
    matches only a request where it is absent too.  The secondary key
    wrote `name=` for an absent field and for an empty one alike, so an
    answer chosen for a request without the field (Accept-Encoding absent:
    any coding) was served to one that sent it empty (no coding at all,
    RFC 9110 12.5.3), and the other way round.  Now they are two
    variants; absent twice, and empty twice, still hit."""
    p = "/headers?Cache-Control=max-age%3D600&Vary=X-V"
    with Origin() as o, Cistern(remap=["map http://m.test/ http://%s/" % o.authority],
                                workers=1, storage=["cache 64M"]) as c:
        seen = []
        for extra in ("", "X-V:\r\n", "", "X-V: \r\n", "X-V: a\r\n"):
            got, _ = raw(c.port, ("GET %s HTTP/1.1\r\nHost: m.test\r\n%s"
                                  "Connection: close\r\n\r\n" % (p, extra)).encode())
            expect_eq(_statuses(got), [200], "status")
            seen.append(len(o.requests()))
        expect_eq(seen, [1, 2, 2, 2, 3], "origin requests after: absent, empty, absent, "
                  "empty, a")



class _BodyBlindOrigin(_RawOrigin):
    """An origin that never reads the body of a GET, HEAD, OPTIONS or
    DELETE (as Python's http.server does unless its handler reads it), nor
    a POST's: on a kept connection, such a body is read as the next
    request (CL.0).  Answers are cacheable; /slow-poison answers "POISON"
    after 300 ms; /early's 10 bytes come in two halves 0.5 s apart."""

    def __init__(self):
        super().__init__(None)

    def _serve(self, s, rec):
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    d = s.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                target = head.split(b" ")[1]
                if target == b"/early":
                    s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nearly")
                    time.sleep(0.5)
                    s.sendall(b"early")
                    continue
                body = b"good " + target
                if target == b"/slow-poison":
                    time.sleep(0.3)
                    body = b"POISON"
                s.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        finally:
            s.close()


def test_body_an_origin_may_not_read_never_leaves_its_connection_pooled():
    """RFC 9110 9.3.1, 9.3.2, 9.3.5, 9.3.7, 9.3.8: content on GET, HEAD,
    DELETE, OPTIONS and TRACE has no defined meaning, and origins that
    never read it exist (Python's http.server).  Cistern forwarded such a
    body and then pooled the connection: the origin read the body as a
    request of its own (here a slow one), and the next client's request,
    given that pooled connection, got the answer to the hidden request --
    stored under its own URL for everyone (CL.0 desync, cache
    poisoning).  Now a connection that carried such a body is closed after
    its answer: the next request gets its own answer on a fresh one."""
    o = _BodyBlindOrigin()
    hidden = b"GET /slow-poison HTTP/1.1\r\nHost: m.test\r\n\r\n"
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1, storage=["cache 64M"]) as c, harness.Collector() as col:
            for method in (b"GET", b"HEAD", b"OPTIONS", b"DELETE"):
                with col.case(method.decode()):
                    victim = b"/victim-" + method
                    with Conn(c.port) as k:
                        k.send(method + b" /a HTTP/1.1\r\nHost: m.test\r\n"
                               b"Content-Length: %d\r\n\r\n" % len(hidden) + hidden)
                        k.response(method.decode())
                    time.sleep(0.05)
                    for _ in range(2):
                        r = harness.one_request(c.port, "GET", victim.decode(), host="m.test")
                        expect(r is not None, "no answer to %r" % victim)
                        expect_eq(r.body, b"good " + victim, "the victim's body")
    finally:
        o.close()


# ---------------------------------------------------------------------------
# Left open by the HTTP/1.1 reviews: Content-Length spellings, trailers,
# and an origin answering a POST before it has its body


def _field_lines(head, name):
    """The field lines of head (bytes, up to the blank line) named name."""
    return [ln for ln in head.split(b"\r\n")[1:]
            if ln.split(b":", 1)[0].lower() == name.lower()]


def test_content_length_goes_on_as_its_decimal_value():
    """RFC 9110 8.6: Content-Length is 1*DIGIT.  Cistern framed by the
    value but passed the field on as it came: `Content-Length: 005`
    reached the origin, where parsers disagree (octal to some, refused
    by others).  Now the origin gets `Content-Length: 5` whatever the
    spelling.  A valid HTAB after the value (RFC 9110 5.5's OWS) was a
    400 (http-parser, the second check, takes only SP there): now it
    passes too.  A list of one value repeated (`5, 5`, or two lines of
    it), which 8.6 lets a recipient refuse or fold, stays refused, as
    do values that differ and a blank inside one (`5 5`): a 400, nothing
    forwarded."""
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    o = _RawOrigin(lambda t: ok, close_after=False)
    good = [[b"005"], [b"0000000000000000000000000005"], [b"\t05\t"], [b"5 \t "]]
    bad = [[b"5, 5"], [b"5,5"], [b"5", b"005"], [b"5 5"], [b"5", b"6"], [b"05, 6"],
           [b"5\t,"]]
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1) as c, harness.Collector() as col:
            for values in good + bad:
                with col.case(repr(values)):
                    o.got.clear()
                    cl = b"".join(b"Content-Length: " + v + b"\r\n" for v in values)
                    got, closed = raw(c.port, b"POST /cl HTTP/1.1\r\nHost: m.test\r\n" + cl
                                      + b"Connection: close\r\n\r\nhello", timeout=3)
                    if values in bad:
                        expect_eq(_statuses(got), [400], "status (%r)" % got[:200])
                        expect_eq(o.seen(), b"", "forwarded")
                        continue
                    expect_eq(_statuses(got), [200], "status (%r)" % got[:200])
                    head, _, body = o.seen().partition(b"\r\n\r\n")
                    expect_eq(_field_lines(head, b"content-length"),
                              [b"Content-Length: 5"], "Content-Length at the origin")
                    expect_eq(body, b"hello", "body at the origin")
            with col.case("000 without a body"):
                o.got.clear()
                got, _ = raw(c.port, b"POST /cl HTTP/1.1\r\nHost: m.test\r\n"
                             b"Content-Length: 000\r\nConnection: close\r\n\r\n", timeout=3)
                expect_eq(_statuses(got), [200], "status")
                expect_eq(_field_lines(o.seen().partition(b"\r\n\r\n")[0], b"content-length"),
                          [b"Content-Length: 0"], "Content-Length at the origin")
    finally:
        o.close()


def test_origin_content_length_reaches_the_client_as_its_decimal_value():
    """The same for an origin's answer: `Content-Length: 005` went to the
    client as it came (and `5<HTAB>` was a 502).  Now the client gets
    `Content-Length: 5`, from the origin and from the stored copy (a
    hit, re-framed by the length it knows already); a HEAD's `0040` is
    `40`.  A list or two lines, of one value or two, stay a 502 and are
    never stored."""
    fields = {
        b"/zeros": b"Content-Length: 005\r\n",
        b"/tab": b"Content-Length: 5\t\r\n",
        b"/head": b"Content-Length: 0040\r\n",
        b"/list": b"Content-Length: 5, 5\r\n",
        b"/lines": b"Content-Length: 5\r\ncontent-length: 005\r\n",
        b"/differ": b"Content-Length: 5, 6\r\n",
        b"/differ-lines": b"Content-Length: 5\r\nContent-Length: 6\r\n",
    }
    o = _RawOrigin(lambda t: b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n" + fields[t]
                   + b"Connection: close\r\n\r\n" + (b"" if t == b"/head" else b"hello"))
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1, storage=["cache 64M"]) as c, harness.Collector() as col:
            for path in (b"/zeros", b"/tab"):
                with col.case(path.decode()):
                    for n in (1, 2):
                        got, _ = raw(c.port, b"GET " + path + b" HTTP/1.1\r\nHost: m.test\r\n"
                                     b"Connection: close\r\n\r\n", timeout=3)
                        head, _, body = got.partition(b"\r\n\r\n")
                        expect_eq(_statuses(got), [200], "status (%r)" % got[:300])
                        expect_eq(_field_lines(head, b"content-length"),
                                  [b"Content-Length: 5"], "Content-Length, answer %d" % n)
                        expect_eq(body, b"hello", "body, answer %d" % n)
                    expect_eq(o.seen().count(b"GET " + path + b" "), 1, "origin requests")
            with col.case("HEAD"):
                got, _ = raw(c.port, b"HEAD /head HTTP/1.1\r\nHost: m.test\r\n"
                             b"Connection: close\r\n\r\n", timeout=3)
                expect_eq(_field_lines(got.partition(b"\r\n\r\n")[0], b"content-length"),
                          [b"Content-Length: 40"], "HEAD's Content-Length (%r)" % got)
            for path in (b"/list", b"/lines", b"/differ", b"/differ-lines"):
                with col.case(path.decode()):
                    for n in (1, 2):
                        got, _ = raw(c.port, b"GET " + path + b" HTTP/1.1\r\nHost: m.test\r\n"
                                     b"Connection: close\r\n\r\n", timeout=3)
                        expect_eq(_statuses(got), [502], "status (%r)" % got[:300])
                    expect_eq(o.seen().count(b"GET " + path + b" "), 2, "origin requests "
                              "(the answer was stored)")
            c.expect_log(r"(differing|repeated) Content-Length")
    finally:
        o.close()


# Trailer fields a recipient may not merge into the head (RFC 9110 6.5.1,
# 6.5.2; RFC 7230 4.1.2 named them): framing, hop-by-hop (7.6.1, and what
# the head's Connection names: X-Hop below), authentication and cookies,
# request modifiers, response controls, how to process the content.
DROPPED_TRAILERS = [
    b"Trailer: X-Sum", b"Connection: x-sum", b"Keep-Alive: timeout=5",
    b"Proxy-Connection: close", b"TE: trailers", b"Upgrade: h2c",
    b"Authorization: Basic YTpi", b"proxy-authorization: Basic YTpi",
    b"WWW-Authenticate: Basic", b"Proxy-Authenticate: Basic", b"Cookie: a=b",
    b"Set-Cookie: a=b", b"Cache-Control: max-age=600", b"Pragma: no-cache",
    b"Expect: 100-continue", b"Max-Forwards: 1", b"Range: bytes=0-1",
    b"If-Match: *", b"If-None-Match: *", b"If-Modified-Since: Thu, 01 Jan 2026 00:00:00 GMT",
    b"If-Unmodified-Since: Thu, 01 Jan 2026 00:00:00 GMT", b"If-Range: \"a\"",
    b"Age: 1", b"Expires: 0", b"Date: Thu, 01 Jan 2026 00:00:00 GMT", b"Location: /x",
    b"Retry-After: 1", b"Vary: *", b"Warning: 110 - x", b"Content-Type: text/x",
    b"CONTENT-ENCODING: gzip", b"Content-Range: bytes 0-1/2", b"X-Hop: 1",
]
KEPT_TRAILERS = [b"X-Sum: 1", b"Server-Timing: a;dur=1", b"X-Hopper: 1"]


def _trailer_section():
    """Kept trailers first, between and last among the dropped ones."""
    lines = [KEPT_TRAILERS[0]] + DROPPED_TRAILERS[:17] + [KEPT_TRAILERS[1]] \
        + DROPPED_TRAILERS[17:] + [KEPT_TRAILERS[2]]
    return b"".join(ln + b"\r\n" for ln in lines) + b"\r\n"


def _pieces(data, n):
    return [data[i:i + n] for i in range(0, len(data), n)]


def test_trailer_fields_a_recipient_may_not_merge_are_dropped():
    """RFC 9110 6.5.1, 6.5.2, 7.6.1: fields that frame or route a message,
    the hop-by-hop ones (and those its Connection names), credentials,
    request modifiers, response controls and content format are never
    trailers a recipient may merge into the head, and a proxy removes the
    hop-by-hop ones from the trailers it forwards.  Cistern refused only
    Content-Length, Transfer-Encoding and Host there, and passed every
    other trailer on as it came, both ways (an origin or client that
    merges trailers took `Connection`, `Authorization`, `Cache-Control`
    or `Set-Cookie` from them).  Now those lines are dropped from a
    request's trailers and an origin's, sent whole or a few bytes a read;
    the others (`X-Sum`, `Server-Timing`, `X-Hopper`, a name Connection
    does not list) go on in order.  A stored answer is re-framed with
    Content-Length: no trailer at all."""
    kept = b"".join(ln + b"\r\n" for ln in KEPT_TRAILERS) + b"\r\n"
    chunked = b"5\r\nhello\r\n0\r\n"
    section = _trailer_section()
    with harness.Collector() as col:
        _trailers_from_a_client(col, chunked, section, chunked + kept)
        _trailers_from_an_origin(col, chunked, section, chunked + kept)


def _trailers_from_a_client(col, chunked, section, want):
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    o = _RawOrigin(lambda t: ok, close_after=False, blanks=2)
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1) as c:
            for step in (None, 1, 7):
                with col.case("request, %s bytes a send" % (step or "all")):
                    o.got.clear()
                    head = (b"POST /t HTTP/1.1\r\nHost: m.test\r\nTransfer-Encoding: chunked\r\n"
                            b"Connection: X-Hop, close\r\n\r\n")
                    with Conn(c.port) as k:
                        k.send(head + chunked)
                        for piece in _pieces(section, step) if step else [section]:
                            k.send(piece)
                            time.sleep(0.002 if step else 0)
                        expect_eq(k.response().status, 200, "status")
                    expect_eq(o.seen().partition(b"\r\n\r\n")[2], want, "the body at the origin")
    finally:
        o.close()


def _trailers_from_an_origin(col, chunked, section, want):
    o = _RawOrigin(lambda t: _pieces(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                                     b"Transfer-Encoding: chunked\r\nConnection: X-Hop, close"
                                     b"\r\n\r\n" + chunked + section, 5 if b"slow" in t else 1 << 20))
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1, storage=["cache 64M"]) as c:
            for path in (b"/all", b"/slow"):
                with col.case("answer " + path.decode()):
                    got, _ = raw(c.port, b"GET " + path + b" HTTP/1.1\r\nHost: m.test\r\n"
                                 b"Connection: close\r\n\r\n", timeout=3)
                    expect_eq(_statuses(got), [200], "status (%r)" % got[:300])
                    expect_eq(got.partition(b"\r\n\r\n")[2], want, "the client's body")
                    r = harness.one_request(c.port, "GET", path.decode(), host="m.test")
                    expect(harness.is_hit(r), "not a hit: %r" % r.headers)
                    expect_eq((r.body, r.trailers, r.chunked), (b"hello", [], False), "the hit")
    finally:
        o.close()


def test_origin_answering_before_the_body_is_sent_is_not_pooled():
    """RFC 9112 9.3 has a server that answers without reading a body
    close the connection; one that does not leaves the body to be read
    as its next request (CL.0, here a POST's).  A connection whose answer
    came before all of the request was sent cannot be known to have had
    the body read, and is not pooled: the answer's end before the body's
    (a body larger than the socket buffers, still unsent) always was
    closed; an answer that began before the body was sent and ended after
    it (a client sending its body after the answer's head) left the
    connection pooled, and the next client's request on it got the
    answer to the request hidden in the body.  (A body the origin was
    sent whole before it answered is beyond what a proxy can know:
    DESIGN.md.)"""
    o = _BodyBlindOrigin()
    hidden = b"GET /slow-poison HTTP/1.1\r\nHost: m.test\r\n\r\n"
    try:
        with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/" % o.port],
                     workers=1) as c, harness.Collector() as col:
            with col.case("body sent after the answer's head"):
                with Conn(c.port) as k:
                    k.send(b"POST /early HTTP/1.1\r\nHost: m.test\r\n"
                           b"Content-Length: %d\r\n\r\n" % len(hidden))
                    harness.wait_for(lambda: k._recv_some(0.1) is None or b"early" in k.buf,
                                     what="the answer's head")
                    k.send(hidden)
                    r = k.response()
                    expect_eq((r.status, r.body), (200, b"earlyearly"), "the POST's answer")
                time.sleep(0.05)
                r = harness.one_request(c.port, "GET", "/victim", host="m.test")
                expect(r is not None, "no answer to /victim")
                expect_eq(r.body, b"good /victim", "the next client's body")
            with col.case("body larger than the socket buffers"):
                time.sleep(0.4)
                k = Conn(c.port)
                big = b"POST /early HTTP/1.1\r\nHost: m.test\r\nContent-Length: %d\r\n\r\n" \
                    % (len(hidden) + (8 << 20)) + hidden + b"x" * (8 << 20)
                t = threading.Thread(target=lambda: _send_quietly(k, big), daemon=True)
                t.start()
                r = k.response()
                expect_eq((r.status, r.body), (200, b"earlyearly"), "the POST's answer")
                k.close()
                time.sleep(0.05)
                r = harness.one_request(c.port, "GET", "/victim2", host="m.test")
                expect(r is not None, "no answer to /victim2")
                expect_eq(r.body, b"good /victim2", "the next client's body")
    finally:
        o.close()


def _send_quietly(k, data):
    try:
        k.send(data)
    except OSError:
        pass


if __name__ == "__main__":
    harness.main()
