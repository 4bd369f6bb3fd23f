#!/usr/bin/env python3
"""t/test_proxy.py: proxying to origin servers, end to end (issue 4).

Every test checks both ends: what the client got AND what reached the
origin (its request log, t/origin.py), so a daemon that answered from the
wrong place, rewrote the wrong thing, or forwarded what it must strip,
fails.  Memory tests sum RssAnon over the master and all its children.

Run one test: python3 -B t/test_proxy.py test_name
"""

import hashlib
import os
import re
import resource
import select
import socket
import threading
import time

import harness
from harness import (Cistern, Collector, Conn, Origin, curl, expect,
                     expect_eq, expect_in, parse_responses,
                     pattern, raw, timeout, wait_for)

MB = 1024 * 1024


def mapped(o, extra=None, records=None, **kw):
    """A daemon with `map http://m.test/ -> origin o`."""
    remap = ["map http://m.test/ http://%s/" % o.authority] + list(extra or [])
    return Cistern(records=records, remap=remap, **kw)


def req(path, host="m.test", method="GET", headers=(), body=None,
        version="HTTP/1.1"):
    """Raw request bytes."""
    lines = ["%s %s %s" % (method, path, version)]
    if host is not None:
        lines.append("Host: %s" % host)
    lines += list(headers)
    if body is not None and not any(h.lower().startswith(
            ("content-length:", "transfer-encoding:")) for h in headers):
        lines.append("Content-Length: %d" % len(body))
    out = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return out + (body or b"")


def hall(rec, name):
    """Every value of header name in an origin request record."""
    return [v for k, v in rec["headers"] if k.lower() == name.lower()]


def tokens(values):
    return [t.strip().lower() for v in values for t in v.split(",")
            if t.strip()]


def only_request(o, what=""):
    rs = o.requests()
    expect_eq(len(rs), 1, "%srequests that reached the origin (%r)"
              % (what, [(x["method"], x["target"]) for x in rs]))
    return rs[0]


def closed_port():
    """A local port with nothing listening (connect: refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def note(msg):
    if os.environ.get("CISTERN_TEST_VERBOSE"):
        print("    note: " + msg)


def check_pattern(data, n, what="body"):
    expect_eq(len(data), n, "%s length" % what)
    expect(data == pattern(n), "%s bytes differ from the origin's" % what)


# ---------------------------------------------------------------------------
# Remap, Host, reverse_map, forward proxy

def test_remap_rewrites_host_port_path_and_keeps_query():
    with Origin() as o, Cistern(remap=[
            "map http://m.test/pre/ http://%s/real/" % o.authority]) as c:
        with Conn(c.port) as k:
            r = k.request(req("/pre/a/b.html?x=1&y=%20z&&q"))
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, b"GET /real/a/b.html?x=1&y=%20z&&q\n", "body")
        rec = only_request(o)
        expect_eq(rec["target"], "/real/a/b.html?x=1&y=%20z&&q",
                  "target at the origin")
        expect_eq(hall(rec, "Host"), [o.authority], "Host at the origin")
        expect_eq(rec["method"], "GET", "method at the origin")
        expect_eq(rec["version"], "HTTP/1.1", "version at the origin")
        expect(r.header("X-Origin-Seq") == "1", "origin's own header "
               "missing from the answer: %r" % r.headers)


def test_host_header_pristine_vs_rewritten():
    with Origin() as o:
        with mapped(o) as c:
            with Conn(c.port) as k:
                r = k.request(req("/x", host="m.test"))
            expect_eq(r.status, 200, "status (default)")
            expect_eq(hall(only_request(o, "default: "), "Host"),
                      [o.authority], "Host with pristine_host_hdr 0")
        o.reset()
        with mapped(o, records={
                "proxy.config.url_remap.pristine_host_hdr": 1}) as c:
            with Conn(c.port) as k:
                r = k.request(req("/x", host="m.test"))
            expect_eq(r.status, 200, "status (pristine)")
            expect_eq(hall(only_request(o, "pristine: "), "Host"),
                      ["m.test"], "Host with pristine_host_hdr 1")


def test_reverse_map_rewrites_location_and_content_location():
    with Origin() as o:
        back = "http://%s/real/" % o.authority
        with Cistern(remap=["map http://m.test/pre/ %s" % back,
                            "reverse_map %s http://m.test/pre/" % back]) as c:
            loc = back + "next/page?q=1"
            path = ("/pre/status/302/headers?Location=%s&Content-Location=%s"
                    "&X-Other=%s" % (loc.replace("?", "%3F").replace(
                        "=", "%3D"), (back + "cl").replace("?", "%3F"),
                        back + "x"))
            with Conn(c.port) as k:
                r = k.request(req(path))
                expect_eq(r.status, 302, "status")
                expect_eq(r.header("Location"),
                          "http://m.test/pre/next/page?q=1", "Location")
                expect_eq(r.header("Content-Location"),
                          "http://m.test/pre/cl", "Content-Location")
                expect_eq(r.header("X-Other"), back + "x",
                          "an unrelated header must not be rewritten")
                # A Location outside the reverse_map prefix stays as is.
                r = k.request(req("/pre/status/301/headers?Location="
                                  "http%3A//elsewhere.test/a"))
                expect_eq(r.header("Location"), "http://elsewhere.test/a",
                          "Location outside the rule")
            rs = o.requests()
            expect_eq(len(rs), 2, "origin requests")
            expect(rs[0]["path"].startswith("/real/status/302/headers"),
                   "origin target %r" % rs[0]["target"])


# Forward proxying to this machine is refused unless a destination rule
# opens it (issue 19); the origins here are on 127.0.0.1.
FORWARD_TO_LOOPBACK = ["src_ip=127.0.0.1 action=ip_allow method=ALL",
                       "dest_ip=127.0.0.1 action=ip_allow method=ALL"]


def test_forward_proxy_absolute_form_ignores_host():
    # The misleading Host header has a rule to origin B: a daemon that
    # routed by Host would reach B; the target's authority is origin A.
    with Origin() as a, Origin() as b:
        with Cistern(records={"proxy.config.url_remap.remap_required": 0},
                     ip_allow=FORWARD_TO_LOOPBACK,
                     remap=["map http://misleading.test/ http://%s/"
                            % b.authority]) as c:
            with Conn(c.port) as k:
                r = k.request(("GET http://%s/fw/x?y=1 HTTP/1.1\r\n"
                               "Host: misleading.test\r\n\r\n"
                               % a.authority).encode())
                expect_eq(r.status, 200, "status")
                expect_eq(r.body, b"GET /fw/x?y=1\n", "body")
                # and a second one on the same connection, HTTP/1.0 style
                r = k.request(("GET http://%s/fw/2 HTTP/1.0\r\n"
                               "Connection: keep-alive\r\n\r\n"
                               % a.authority).encode())
                expect_eq(r.status, 200, "status (1.0)")
            expect_eq(b.requests(), [], "requests that reached the Host "
                      "header's origin")
            rs = a.requests()
            expect_eq([x["target"] for x in rs], ["/fw/x?y=1", "/fw/2"],
                      "targets at the target's origin (origin-form)")
            expect_eq(hall(rs[0], "Host"), [a.authority],
                      "Host at the origin")


def test_absolute_form_without_rule_404_when_remap_required():
    with Origin() as o:
        with mapped(o) as c:
            with Conn(c.port) as k:
                r = k.request(("GET http://%s/x HTTP/1.1\r\nHost: m.test"
                               "\r\n\r\n" % o.authority).encode())
                expect_eq(r.status, 404, "status")
                # the connection is still usable, and a mapped request works
                r = k.request(req("/ok"))
                expect_eq(r.status, 200, "mapped request after the 404")
            expect_eq([x["target"] for x in o.requests()], ["/ok"],
                      "what reached the origin")


def test_connect_port_refused():
    # A forward proxy tunnels only to proxy.config.http.connect_ports (443
    # by default): the origin's port is refused with 403, nothing reaches
    # it (t/test_tunnel.py has the tunnels themselves).
    with Origin() as o:
        with Cistern(records={"proxy.config.url_remap.remap_required": 0},
                     remap=["map http://m.test/ http://%s/"
                            % o.authority]) as c:
            data, closed = raw(c.port, ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n"
                                        "\r\n" % (o.authority, o.authority)
                                        ).encode(), timeout=3)
            rs = parse_responses(data)
            expect_eq([x.status for x in rs], [403], "statuses")
            expect(b"connect_ports" in rs[0].body, "reason: %r" % rs[0].body)
            expect_eq(o.requests(), [], "requests that reached the origin")
            expect_eq(o.conns(), [], "connections to the origin")


# ---------------------------------------------------------------------------
# Headers

HOP_REQ = ["Connection: keep-alive, X-Foo", "X-Foo: secret",
           "Keep-Alive: timeout=5", "TE: trailers", "Upgrade: websocket",
           "Proxy-Connection: keep-alive", "X-Keep: yes"]


def test_hop_by_hop_request_headers_stripped():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/a", headers=HOP_REQ))
            expect_eq(r.status, 200, "status")
        with Conn(c.port) as k:
            r = k.request(req("/b", headers=["Connection: close, X-Bar",
                                             "X-Bar: 1", "X-Keep: yes"]))
            expect_eq(r.status, 200, "status (Connection: close)")
            expect(k.closed_within(3), "client asked to close; still open")
        rs = o.requests()
        expect_eq(len(rs), 2, "origin requests")
        with Collector() as coll:
            for rec, gone in ((rs[0], ["x-foo", "keep-alive", "te", "upgrade",
                                       "proxy-connection"]),
                              (rs[1], ["x-bar"])):
                with coll.case(rec["target"]):
                    names = [n.lower() for n, v in rec["headers"]]
                    for g in gone:
                        expect(g not in names, "origin received %s: %r"
                               % (g, rec["headers"]))
                    ct = tokens(hall(rec, "Connection"))
                    for t in ("x-foo", "x-bar", "close", "upgrade"):
                        expect(t not in ct, "client's Connection token %r "
                               "reached the origin: %r" % (t, ct))
                    expect_eq(hall(rec, "X-Keep"), ["yes"],
                              "end-to-end header")


def test_hop_by_hop_response_headers_stripped():
    with Origin() as o, mapped(o) as c:
        q = ("/headers?Connection=X-Bar%2C%20keep-alive&X-Bar=1"
             "&Keep-Alive=timeout%3D5&Upgrade=h2c&Proxy-Connection=keep-alive"
             "&Proxy-Authenticate=Basic&X-Keep=yes")
        with Conn(c.port) as k:
            r = k.request(req(q))
            expect_eq(r.status, 200, "status")
            names = [n.lower() for n, v in r.headers]
            for g in ("x-bar", "keep-alive", "upgrade", "proxy-connection",
                      "proxy-authenticate"):
                expect(g not in names, "client received %s: %r"
                       % (g, r.headers))
            expect("x-bar" not in tokens(r.header_all("Connection")),
                   "origin's Connection tokens reached the client")
            expect_eq(r.header("X-Keep"), "yes", "end-to-end header")
            # The origin closes its connection: the client's stays open.
            r = k.request(req("/conn-close"))
            expect_eq(r.status, 200, "status (origin Connection: close)")
            expect(not r.has_token("Connection", "close"),
                   "origin's Connection: close reached the client: %r"
                   % r.headers)
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "next request, same client "
                      "connection")
        expect_eq(len(o.requests()), 3, "origin requests")


def test_via_both_ways_and_proxy_name():
    # ATS's defaults: Via to the origin (insert_request_via_str 1), none
    # of ours to the client (insert_response_via_str 0); ATS's format,
    # "PROTO NAME (STRING)".  t/test_ats_headers.py has the levels.
    via = r"http/1\.1 %s \(Cistern/[0-9][0-9A-Za-z.~+-]*\)"
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/headers?Via=1.1%20origin-cdn",
                              headers=["Via: 1.0 upstream"]))
        expect_eq(r.status, 200, "status")
        expect_eq(tokens(r.header_all("Via")), ["1.1 origin-cdn"],
                  "Via to the client")
        got = hall(only_request(o), "Via")
        expect_eq(len(got), 2, "Via lines at the origin: %r" % got)
        expect_eq(got[0], "1.0 upstream", "the client's Via")
        expect(re.fullmatch(via % "cistern", got[1]), "our Via %r" % got)
    with Origin() as o, mapped(o, records={
            "proxy.config.proxy_name": "edge7",
            "proxy.config.http.insert_response_via_str": 1}) as c:
        with Conn(c.port) as k:
            r = k.request(req("/x"))
        got = r.header_all("Via")
        expect(len(got) == 1 and re.fullmatch(via % "edge7", got[0]),
               "Via with proxy_name: %r" % got)
        got = hall(only_request(o), "Via")
        expect(len(got) == 1 and re.fullmatch(via % "edge7", got[0]),
               "Via at the origin with proxy_name: %r" % got)


def test_x_forwarded_for_appended():
    with Origin() as o, mapped(o) as c:
        with Collector() as coll:
            for name, hs, want in (
                    ("none", [], "127.0.0.1"),
                    ("one", ["X-Forwarded-For: 203.0.113.7"],
                     "203.0.113.7, 127.0.0.1"),
                    ("list", ["X-Forwarded-For: 203.0.113.7, 198.51.100.2"],
                     "203.0.113.7, 198.51.100.2, 127.0.0.1"),
                    ("two-lines", ["X-Forwarded-For: 203.0.113.7",
                                   "X-Forwarded-For: 198.51.100.2"],
                     "203.0.113.7, 198.51.100.2, 127.0.0.1")):
                with coll.case(name):
                    o.reset()
                    with Conn(c.port) as k:
                        r = k.request(req("/" + name, headers=hs))
                    expect_eq(r.status, 200, "status")
                    rec = only_request(o)
                    got = ", ".join(hall(rec, "X-Forwarded-For"))
                    expect_eq(got, want, "X-Forwarded-For at the origin "
                              "(sent %r)" % hs)


def test_connection_listed_fields_any_case_several_lines():
    # RFC 9110 7.6.1: every field a Connection line names is removed, the
    # names compared without case, over all Connection lines; a listed
    # Via / X-Forwarded-For of the client goes, ours are still added.
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/a", headers=[
                "Connection: X-A", "x-a: 1", "X-B: 2",
                "connection: x-b, VIA,  x-forwarded-for ",
                "Via: 1.0 client-side", "X-Forwarded-For: 203.0.113.9",
                "X-Keep: yes", "x-a: again"]))
            expect_eq(r.status, 200, "status")
        rec = only_request(o)
        names = [n.lower() for n, v in rec["headers"]]
        with Collector() as coll:
            for gone in ("x-a", "x-b", "connection"):
                with coll.case(gone):
                    expect(gone not in names, "origin received %s: %r"
                           % (gone, rec["headers"]))
            with coll.case("kept"):
                expect_eq(hall(rec, "X-Keep"), ["yes"], "end-to-end header")
                got = hall(rec, "Via")
                expect(len(got) == 1 and got[0].startswith("http/1.1 cistern ("),
                       "Via: %r" % got)
                expect_eq(hall(rec, "X-Forwarded-For"), ["127.0.0.1"],
                          "X-Forwarded-For")
    with Origin() as o, mapped(o) as c:
        q = ("/headers?Connection=X-C&connection=x-d%2C%20VIA&X-C=1&x-d=2"
             "&Via=1.0%20origin-side&X-Keep=yes")
        with Conn(c.port) as k:
            r = k.request(req(q))
            expect_eq(r.status, 200, "status (response)")
            names = [n.lower() for n, v in r.headers]
            for gone in ("x-c", "x-d"):
                expect(gone not in names, "client received %s: %r"
                       % (gone, r.headers))
            expect_eq(r.header_all("Via"), [], "Via to the client "
                      "(insert_response_via_str 0)")
            expect_eq(r.header("X-Keep"), "yes", "end-to-end header")


def test_connection_cannot_strip_content_length():
    # "Connection: content-length" must not cost a message its framing: a
    # POST whose Content-Length went missing on the way would reach the
    # origin as a bodiless request followed by its body, parsed as a
    # request of its own (smuggled past us); a response that lost it would
    # leave the client unable to find its end.
    smuggled = b"GET /smuggled HTTP/1.1\r\nHost: m.test\r\n\r\n"
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/post", method="POST", body=smuggled,
                              headers=["Connection: content-length"]))
            expect_eq(r.status, 200, "status")
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "next request")
        rs = o.requests()
        expect_eq([(x["method"], x["target"]) for x in rs],
                  [("POST", "/post"), ("GET", "/after")],
                  "requests at the origin")
        expect_eq(rs[0]["body"].encode("latin-1"), smuggled, "body")
        expect_eq(hall(rs[0], "Content-Length"), [str(len(smuggled))],
                  "Content-Length at the origin")
        with Conn(c.port) as k:
            r = k.request(req("/headers?Connection=Content-Length"))
            expect_eq(r.status, 200, "status (response)")
            expect_eq(r.header("Content-Length"), str(len(r.body)),
                      "Content-Length to the client")
            r = k.request(req("/again"))
            expect_eq(r.body, b"GET /again\n", "next response, same "
                      "connection")


def test_response_date_added_only_when_missing():
    with Origin() as o, mapped(o) as c:
        o.script("/nodate", [{"raw": b"HTTP/1.1 200 OK\r\n"
                              b"Content-Length: 2\r\n\r\nok", "keep": True}])
        o.script("/olddate", [{"raw": b"HTTP/1.1 200 OK\r\nDATE: Sun, 06 Nov "
                               b"1994 08:49:37 GMT\r\nContent-Length: 2\r\n"
                               b"\r\nok", "keep": True}])
        with Conn(c.port) as k:
            r = k.request(req("/nodate"))
            expect_eq(r.status, 200, "status")
            dates = r.header_all("Date")
            expect_eq(len(dates), 1, "Date fields (%r)" % r.headers)
            expect(dates[0].endswith(" GMT") and len(dates[0]) == 29,
                   "Date value %r" % dates[0])
            r = k.request(req("/olddate"))
            expect_eq(r.header_all("Date"), ["Sun, 06 Nov 1994 08:49:37 GMT"],
                      "the origin's Date, once")


def test_interim_response_hop_by_hop_stripped():
    raw_resp = (b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n"
                b"Connection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\n"
                b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    with Origin() as o, mapped(o) as c:
        o.script("/early", [{"raw": raw_resp, "keep": True}])
        got, _ = raw(c.port, b"GET /early HTTP/1.1\r\nHost: m.test\r\n"
                     b"Connection: close\r\n\r\n", timeout=5)
        interim = got.split(b"\r\n\r\n", 1)[0]
        expect(interim.startswith(b"HTTP/1.1 103 Early Hints\r\n"),
               "interim status line: %r" % got[:60])
        expect_in(b"Link: </s.css>; rel=preload", interim, "103's fields")
        for gone in (b"X-Hop", b"Keep-Alive", b"Connection: X-Hop"):
            expect(gone not in interim, "%r forwarded in the 103: %r"
                   % (gone, interim))
        expect(got.endswith(b"\r\n\r\nok"), "final body: %r" % got[-40:])


def test_x_forwarded_for_ipv6_client():
    try:
        socket.create_connection(("::1", closed_port()), timeout=1).close()
    except ConnectionRefusedError:
        pass
    except OSError as e:
        raise harness.SkipTest("no IPv6 loopback: %s" % e)
    with Origin() as o, mapped(o, records={
            "proxy.config.http.server_ports": "0 0:ipv6"}) as c:
        expect_eq(len(c.ports), 2, "ports (%r)" % c.ports)
        with Conn(c.ports[1], host="::1") as k:
            r = k.request(req("/v6", headers=["X-Forwarded-For: 2001:db8::7"]))
            expect_eq(r.status, 200, "status")
        expect_eq(hall(only_request(o), "X-Forwarded-For"),
                  ["2001:db8::7, ::1"], "X-Forwarded-For at the origin")


# ---------------------------------------------------------------------------
# Request bodies

def test_request_body_content_length_and_chunked():
    body = bytes(range(256)) * 40 + b"\r\n0\r\n\r\n tail"
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/cl", method="POST", body=body))
            expect_eq(r.status, 200, "status (Content-Length)")
            # chunked, with an extension and a trailer
            parts = [body[:1000], body[1000:1001], body[1001:]]
            chunked = b"".join(b"%x;ext=v\r\n%s\r\n" % (len(p), p)
                               for p in parts) + b"0\r\nX-Tr: t\r\n\r\n"
            r = k.request(req("/ch", method="PUT", headers=[
                "Transfer-Encoding: chunked"]) + chunked)
            expect_eq(r.status, 200, "status (chunked)")
            # and the connection still works afterwards
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "request after the bodies")
        rs = o.requests()
        expect_eq([x["target"] for x in rs], ["/cl", "/ch", "/after"],
                  "origin targets")
        with Collector() as coll:
            with coll.case("content-length"):
                expect_eq(rs[0]["body"].encode("latin-1"), body,
                          "body at the origin")
                expect_eq(hall(rs[0], "Content-Length"), [str(len(body))],
                          "Content-Length at the origin")
            with coll.case("chunked"):
                expect_eq(rs[1]["method"], "PUT", "method")
                expect_eq(rs[1]["body"].encode("latin-1"), body,
                          "body at the origin")
                expect(hall(rs[1], "Content-Length") == [],
                       "Content-Length added to a chunked body")


def _sender(port, data, result):
    try:
        k = Conn(port, timeout=60)
        k.send(data)
        result["resp"] = k.response(timeout=60)
        k.close()
    except BaseException as e:      # noqa: BLE001
        result["error"] = e


@timeout(90)
def test_large_upload_streamed_with_bounded_memory():
    n = 20 * MB
    body = pattern(n, 7)
    sha = hashlib.sha256(body).hexdigest()
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:        # warm up: buffers, pools
            k.request(req("/warm", method="POST", body=b"x" * 100000))
        idle = c.rss_anon()
        # The origin reads 64 KiB every 5 ms (~12 MB/s): if the daemon
        # buffered the upload instead of pushing back, it would hold most
        # of the 20 MB while the origin dawdles.
        result = {}
        t = threading.Thread(target=_sender, args=(c.port, req(
            "/sink/slow-read/5", method="POST", body=body), result))
        t.start()
        peak = idle
        while t.is_alive():
            peak = max(peak, c.rss_anon())
            time.sleep(0.05)
        t.join()
        if "error" in result:
            raise result["error"]
        expect_eq(result["resp"].status, 200, "status")
        rec = o.requests()[-1]
        expect_eq(rec["body_len"], n, "bytes that reached the origin")
        expect_eq(rec["body_sha256"], sha, "SHA-256 of the body at the "
                  "origin")
        grew = peak - idle
        note("upload: idle %.1f MB, peak %.1f MB" % (idle / MB, peak / MB))
        expect(grew < 8 * MB, "RssAnon grew by %.1f MB during a 20 MB "
               "upload (idle %.1f MB, peak %.1f MB)"
               % (grew / MB, idle / MB, peak / MB))


# ---------------------------------------------------------------------------
# Response bodies

def test_response_content_length_body():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/bytes/300000"))
            expect_eq(r.status, 200, "status")
            expect_eq(r.header("Content-Length"), "300000", "Content-Length")
            check_pattern(r.body, 300000)
            r = k.request(req("/bytes/0"))
            expect_eq((r.status, r.body), (200, b""), "empty body")
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "next request")
        expect_eq(len(o.requests()), 3, "origin requests")


def test_response_chunked_to_http11_stays_chunked():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/chunked/100000"))
            expect_eq(r.status, 200, "status")
            expect(r.chunked, "response to an HTTP/1.1 client is not "
                   "chunked: %r" % r.headers)
            expect(r.header("Content-Length") is None, "CL with chunked")
            check_pattern(r.body, 100000)
            expect(k.open_after(0.3), "connection closed after a chunked "
                   "response")
            # extensions and trailers from the origin
            o.script("/ext", [{"raw": b"HTTP/1.1 200 OK\r\nTransfer-Encoding:"
                               b" chunked\r\n\r\n5;name=val\r\nhello\r\n"
                               b"6\r\n world\r\n0\r\nX-T: 1\r\n\r\n",
                               "keep": True}])
            r = k.request(req("/ext"))
            expect_eq((r.status, r.body), (200, b"hello world"),
                      "chunked with extensions and trailers")
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "next request")




def test_max_forwards_trace_and_options():
    """RFC 9110 7.6.2: a TRACE or OPTIONS with Max-Forwards: 0 is answered
    by the proxy as the final recipient (TRACE echoes the request as
    message/http, without its credentials; OPTIONS lists the methods);
    with more, it is forwarded with one fewer.  Other methods pass
    Max-Forwards on untouched."""
    with Origin() as o, mapped(o) as c:
        data, _ = raw(c.port, req("/t", method="TRACE", headers=[
            "Max-Forwards: 0", "X-Mark: 1", "Cookie: secret=1",
            "Authorization: Basic eDp5", "Connection: close"]))
        r = parse_responses(data, methods=["TRACE"])[0]
        expect_eq(r.status, 200, "TRACE status")
        expect_eq(r.header("Content-Type"), "message/http", "TRACE type")
        expect(r.header("Cache-Status"), "TRACE answer without Cache-Status")
        expect(r.body.startswith(b"TRACE /t HTTP/1.1\r\n")
               and b"X-Mark: 1\r\n" in r.body and r.body.endswith(b"\r\n\r\n"),
               "TRACE echo: %r" % r.body)
        expect(b"secret" not in r.body and b"eDp5" not in r.body,
               "TRACE echoed credentials: %r" % r.body)
        data, _ = raw(c.port, req("/o", method="OPTIONS", headers=[
            "Max-Forwards: 0", "Connection: close"]))
        r = parse_responses(data, methods=["OPTIONS"])[0]
        expect_eq(r.status, 200, "OPTIONS status")
        expect("TRACE" in (r.header("Allow") or ""), "Allow: %r" % r.header("Allow"))
        expect_eq(o.requests(), [], "requests that reached the origin")

        for method, sent, fwd in (("TRACE", "3", "2"), ("OPTIONS", "1", "0"),
                                  ("GET", "0", "0"), ("TRACE", "x", "x")):
            o.reset()
            data, _ = raw(c.port, req("/f", method=method, headers=[
                "Max-Forwards: %s" % sent, "Connection: close"]))
            rs = parse_responses(data, methods=[method])
            expect_eq(rs[0].status, 200, "%s Max-Forwards %s" % (method, sent))
            q = only_request(o, "%s Max-Forwards %s: " % (method, sent))
            expect_eq(hall(q, "Max-Forwards"), [fwd],
                      "%s Max-Forwards %s forwarded as" % (method, sent))

def test_response_unknown_transfer_coding_read_until_close():
    """RFC 9112 6.3: a response whose Transfer-Encoding does not end in
    chunked is read until the origin closes.  The whole body reaches the
    client, close-delimited, never cut short with a reset."""
    with Origin() as o, mapped(o) as c:
        o.script("/te", [{"raw": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: FOOBAR"
                          b"\r\nContent-Type: text/plain\r\n\r\n"
                          + b"0123456789" * 300}])
        data, closed = raw(c.port, req("/te"), timeout=5)
        expect(closed, "connection not closed after a close-delimited body")
        rs = parse_responses(data)
        expect_eq(len(rs), 1, "responses")
        expect_eq(rs[0].status, 200, "status")
        expect_eq(rs[0].body, b"0123456789" * 300, "body")

def test_response_chunked_to_http10_dechunked_and_closed():
    with Origin() as o, mapped(o) as c:
        data, closed = raw(c.port, req("/chunked/100000", version="HTTP/1.0"),
                           timeout=5)
        expect(closed, "connection not closed after a de-chunked response")
        rs = parse_responses(data)
        expect_eq(len(rs), 1, "responses")
        r = rs[0]
        expect(not r.chunked and r.header("Transfer-Encoding") is None,
               "chunked sent to an HTTP/1.0 client: %r" % r.headers)
        check_pattern(r.body, 100000)
        # Even when it asked for keep-alive, a close-delimited body closes.
        data, closed = raw(c.port, req("/chunked/5000", version="HTTP/1.0",
                                       headers=["Connection: keep-alive"]),
                           timeout=5)
        expect(closed, "connection not closed (1.0 keep-alive, de-chunked)")
        r = parse_responses(data)[0]
        check_pattern(r.body, 5000)
        expect(not r.has_token("Connection", "keep-alive"),
               "promised keep-alive on a close-delimited body: %r"
               % r.headers)


def test_response_read_until_close():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            k.send(req("/no-length/200000"))
            expect(k.read_until_close(5), "connection not closed after a "
                   "close-delimited body")
            rs = parse_responses(k.buf)
            expect_eq(len(rs), 1, "responses")
            r = rs[0]
            expect_eq(r.status, 200, "status")
            if r.chunked:
                pass    # re-framing as chunked is fine too
            check_pattern(r.body, 200000)


def test_head_204_304_have_no_body():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/bytes/1000", method="HEAD"), method="HEAD")
            expect_eq(r.status, 200, "HEAD status")
            expect_eq(r.header("Content-Length"), "1000", "HEAD CL")
            r = k.request(req("/chunked/1000", method="HEAD"), method="HEAD")
            expect_eq(r.status, 200, "HEAD (chunked) status")
            r = k.request(req("/status/204"))
            expect_eq((r.status, r.body), (204, b""), "204")
            r = k.request(req("/etag/abc", headers=['If-None-Match: "abc"']))
            expect_eq((r.status, r.body), (304, b""), "304")
            # If any of those leaked body bytes, this one misparses.
            r = k.request(req("/bytes/10"))
            expect_eq((r.status, r.body), (200, pattern(10)),
                      "request after HEAD/204/304")
            expect(k.open_after(0.3), "connection closed")
            expect_eq(k.buf[k.pos:], b"", "stray bytes after the responses")
        rs = o.requests()
        expect_eq([x["method"] for x in rs], ["HEAD", "HEAD", "GET", "GET",
                                              "GET"], "origin methods")
        expect_eq(hall(rs[3], "If-None-Match"), ['"abc"'],
                  "If-None-Match at the origin")


def test_expect_100_continue():
    body = pattern(5000, 3)
    with Origin() as o, mapped(o) as c:
        d = os.path.join(c.tmpdir, "up")
        with open(d, "wb") as f:
            f.write(body)
        t0 = time.monotonic()
        r = curl([c.url("/upload"), "-H", "Host: m.test", "-H",
                  "Expect: 100-continue", "--expect100-timeout", "10",
                  "--data-binary", "@" + d])
        took = time.monotonic() - t0
        expect_eq(r.rc, 0, "curl rc (%s)" % r.stderr)
        expect_eq(r.status, 200, "status")
        expect_eq([h[0] for h in r.all_heads], [100, 200],
                  "interim and final statuses seen by curl")
        expect(took < 5, "took %.1fs: no 100 Continue before the timeout"
               % took)
        rec = only_request(o)
        expect_eq(rec["body"].encode("latin-1"), body, "body at the origin")
        # Raw: the client waits for 100 before sending the body.
        with Conn(c.port) as k:
            k.send(req("/raw", method="POST", headers=[
                "Expect: 100-continue", "Content-Length: %d" % len(body)]))
            wait_for(lambda: k._recv_some(0.2) is None or b"\r\n\r\n" in k.buf,
                     5, what="100 Continue")
            expect(k.buf.startswith(b"HTTP/1.1 100"), "first bytes %r"
                   % k.buf[:60])
            k.send(body)
            r = k.response()
            expect_eq(r.status, 200, "final status")
        expect_eq(o.requests()[-1]["body"].encode("latin-1"), body,
                  "raw body at the origin")


def test_large_heads_both_ways():
    # Heads bigger than one 16 KiB buffer but under the 128 KiB limits.
    big = "v" * 40000
    with Origin() as o, mapped(o) as c:
        o.script("/big", [{"headers": [["X-Big", big]], "body": "ok"}])
        o.script("/huge", [{"headers": [["X-Big", "w" * 140000]],
                            "body": "ok"}])
        with Collector() as coll:
            with coll.case("request head 40 KB"):
                with Conn(c.port) as k:
                    r = k.request(req("/r", headers=["X-Big: " + big]))
                    expect_eq(r.status, 200, "status (body %r)" % r.body)
                rs = [x for x in o.requests() if x["path"] == "/r"]
                expect_eq(len(rs), 1, "requests at the origin")
                expect_eq(hall(rs[0], "X-Big"), [big], "X-Big at the origin")
            with coll.case("request head just under 16 KiB"):
                # fits the client's buffer, but not once Via and
                # X-Forwarded-For are added for the origin
                mid = "u" * (16384 - 71)
                with Conn(c.port) as k:
                    r = k.request(req("/r2", headers=["X-Big: " + mid]))
                    expect_eq(r.status, 200, "status (body %r)" % r.body)
                rs = [x for x in o.requests() if x["path"] == "/r2"]
                expect_eq(len(rs), 1, "requests at the origin")
                expect(hall(rs[0], "X-Big") == [mid], "X-Big mangled at "
                       "the origin")
            with coll.case("response head 40 KB"):
                with Conn(c.port) as k:
                    r = k.request(req("/big"))
                    expect_eq((r.status, r.body), (200, b"ok"), "answer")
                    expect(r.header("X-Big") == big, "X-Big mangled (%d "
                           "bytes)" % len(r.header("X-Big") or ""))
            with coll.case("response head 140 KB"):
                with Conn(c.port) as k:
                    r = k.request(req("/huge"))
                    expect_eq(r.status, 502, "status")
                    expect(b"w" * 100 not in r.body, "origin bytes leaked")


def test_origin_sends_more_than_content_length_or_http10():
    # Bytes past Content-Length are not body and not a next response: the
    # client gets exactly the announced bytes and that origin connection
    # is not reused.  An HTTP/1.0 response without keep-alive is not
    # pooled either.
    with Origin() as o, mapped(o) as c:
        o.script("/extra", [{"raw": b"HTTP/1.1 200 OK\r\nContent-Length: 2"
                             b"\r\n\r\nokHTTP/1.1 200 OK\r\n"
                             b"Content-Length: 5\r\n\r\nEVIL!", "keep": True}])
        o.script("/h10", [{"raw": b"HTTP/1.0 200 OK\r\nContent-Length: 2"
                           b"\r\n\r\nok", "keep": True}])
        with Conn(c.port) as k:
            r = k.request(req("/extra"))
            expect_eq((r.status, r.body), (200, b"ok"), "answer")
            r = k.request(req("/next"))
            expect_eq(r.body, b"GET /next\n", "next answer")
            r = k.request(req("/h10"))
            expect_eq((r.status, r.body), (200, b"ok"), "1.0 answer")
            r = k.request(req("/next2"))
            expect_eq(r.body, b"GET /next2\n", "answer after the 1.0 one")
            expect(k.open_after(0.2), "client connection closed")
        conn_of = {x["path"]: x["conn"] for x in o.requests()}
        expect(conn_of["/next"] != conn_of["/extra"],
               "connection with stray bytes was reused")
        expect(conn_of["/next2"] != conn_of["/h10"],
               "HTTP/1.0 connection without keep-alive was reused")
        want = {conn_of["/extra"], conn_of["/h10"]}
        wait_for(lambda: {x["conn"] for x in o.conns()
                          if x["end"] == "peer-eof"} >= want, 3,
                 what="the daemon to close those origin connections")


def test_origin_1xx_forwarded_to_http11_only():
    # RFC 9110 15.2: a proxy forwards the 1xx responses it did not ask for
    # to HTTP/1.1 clients; an HTTP/1.0 client cannot take them.
    raw_resp = (b"HTTP/1.1 100 Continue\r\n\r\n"
                b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; "
                b"rel=preload\r\n\r\nHTTP/1.1 200 OK\r\n"
                b"Content-Length: 2\r\n\r\nok")
    with Origin() as o, mapped(o) as c:
        o.script("/early", [{"raw": raw_resp, "keep": True}])
        got, _ = raw(c.port, b"GET /early HTTP/1.1\r\nHost: m.test\r\n"
                     b"Connection: close\r\n\r\n", timeout=5)
        heads = [l for l in got.split(b"\r\n") if l.startswith(b"HTTP/1.1 ")]
        expect_eq([h.split(b" ")[1] for h in heads], [b"100", b"103", b"200"],
                  "status lines to a 1.1 client (%r)" % got)
        expect_in(b"Link: </s.css>; rel=preload", got, "103's fields")
        expect(got.endswith(b"\r\n\r\nok"), "final body: %r" % got[-40:])
        got, _ = raw(c.port, b"GET /early HTTP/1.0\r\nHost: m.test\r\n\r\n",
                     timeout=5)
        expect(got.startswith(b"HTTP/1.1 200 "), "1.0 client: no 1xx (%r)" % got[:60])
        with Conn(c.port) as k:
            k.send(b"GET /early HTTP/1.0\r\nHost: m.test\r\nConnection: keep-alive\r\n\r\n")
            r = k.response()
            expect_eq((r.status, r.body), (200, b"ok"), "final response")
            r = k.request(req("/after"))
            expect_eq(r.body, b"GET /after\n", "next request on the connection")


# ---------------------------------------------------------------------------
# The origin connection pool

def test_origin_connection_reused():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r1 = k.request(req("/one"))
            r2 = k.request(req("/two/chunked/3000"))
            r3 = k.request(req("/three", method="POST", body=b"abc"))
        expect_eq([r1.status, r2.status, r3.status], [200] * 3, "statuses")
        rs = o.requests()
        expect_eq(len(rs), 3, "origin requests")
        expect_eq(len({x["conn"] for x in rs}), 1,
                  "origin connections used for 3 sequential requests (%r)"
                  % [x["conn"] for x in rs])
        expect_eq(len(o.conns()), 1, "connections the origin accepted")


def test_dead_pooled_connection_retried_for_get():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/first/drop-next"))
            expect_eq(r.status, 200, "first")
            first_conn = r.header("X-Origin-Conn")
            # The pooled connection is dead: the origin closes it when the
            # next request arrives, without a byte of response.
            r = k.request(req("/second/bytes/20"))
            expect_eq((r.status, r.body), (200, pattern(20)),
                      "GET on a dead pooled connection")
            expect(r.header("X-Origin-Conn") != first_conn,
                   "answered on the dead connection?")
        rs = o.requests()
        expect_eq([(x["path"], bool(x.get("dropped"))) for x in rs],
                  [("/first/drop-next", False), ("/second/bytes/20", True),
                   ("/second/bytes/20", False)], "origin log")
        # An origin that closes idle connections quickly: the next request
        # still works (the pool noticed, or the retry covered it).
        o.reset()
        with Conn(c.port) as k:
            r = k.request(req("/a/close-idle/100"))
            expect_eq(r.status, 200, "a")
            cid = int(r.header("X-Origin-Conn"))
            wait_for(lambda: [x for x in o.conns() if x["conn"] == cid
                              and x["closed"]], 3,
                     what="the origin to close its idle connection")
            r = k.request(req("/b/bytes/30"))
            expect_eq((r.status, r.body), (200, pattern(30)),
                      "GET after the origin closed the idle connection")


def test_dead_pooled_connection_not_retried_for_post():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            r = k.request(req("/first/drop-next"))
            expect_eq(r.status, 200, "first")
            r = k.request(req("/post", method="POST", body=b"once"))
            expect_eq(r.status, 502, "POST on a dead pooled connection")
        rs = o.requests()
        expect_eq([x["path"] for x in rs], ["/first/drop-next", "/post"],
                  "a POST must reach the origin once, never be repeated")


def test_idle_origin_connections_closed_and_bounded():
    # keep_alive_no_activity_timeout_out closes an idle pooled connection;
    # per_server.connection.max_idle bounds how many stay pooled.
    with Origin() as o, mapped(o, workers=1, records={
            "proxy.config.http.keep_alive_no_activity_timeout_out": 1,
            "proxy.config.http.per_server.connection.max_idle": 1}) as c:
        ks = [Conn(c.port, timeout=5) for _ in range(3)]
        try:
            for i, k in enumerate(ks):     # 3 transactions at once
                k.send(req("/delay/300/p%d" % i))
            for k in ks:
                expect_eq(k.response().status, 200, "status")
        finally:
            for k in ks:
                k.close()
        expect_eq(len(o.conns()), 3, "origin connections for 3 concurrent "
                  "requests")
        # max_idle 1: two are closed at once, one is pooled...
        wait_for(lambda: sum(1 for x in o.conns() if x["closed"]) >= 2, 0.8,
                 what="2 of 3 origin connections closed (max_idle 1): %r"
                 % o.conns())
        t0 = time.monotonic()
        # ...and that one goes after the 1 s idle timeout.
        conns = wait_for(lambda: (lambda cs: cs if all(
            x["closed"] for x in cs) else None)(o.conns()), 4,
            what="the pooled origin connection to be closed when idle")
        expect(time.monotonic() - t0 > 0.3, "pooled one closed at once: "
               "nothing was pooled")
        expect_eq(sorted(x["end"] for x in conns), ["peer-eof"] * 3,
                  "how the origin connections ended")


def test_origin_by_name_resolved():
    # "localhost" goes through the resolver (evdns reads /etc/hosts).
    with Origin() as o, Cistern(remap=[
            "map http://m.test/ http://localhost:%d/" % o.port]) as c:
        with Conn(c.port) as k:
            r = k.request(req("/named"))
        expect_eq((r.status, r.body), (200, b"GET /named\n"), "answer")
        expect_eq(hall(only_request(o), "Host"), ["localhost:%d" % o.port],
                  "Host at the origin")


# ---------------------------------------------------------------------------
# Origin errors

def test_504_connect_timeout():
    # A listener with a full accept queue: SYNs go unanswered.
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(0)
    port = lsock.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    try:
        with Cistern(records={
                "proxy.config.http.connect_attempts_timeout": 1,
                "proxy.config.http.connect_attempts_max_retries": 0},
                remap=["map http://m.test/ http://127.0.0.1:%d/"
                       % port]) as c:
            probe = socket.socket()
            probe.setblocking(False)
            probe.connect_ex(("127.0.0.1", port))
            _, w, _ = select.select([], [probe], [], 0.5)
            probe.close()
            if w:
                raise harness.SkipTest("cannot make a connect hang here")
            t0 = time.monotonic()
            with Conn(c.port, timeout=10) as k:
                r = k.request(req("/x"))
            took = time.monotonic() - t0
            expect_eq(r.status, 504, "status")
            expect(0.8 < took < 4, "504 after %.1fs (timeout 1 s)" % took)
            c.wait_log(r"conn \d+: connect to origin 127\.0\.0\.1:%d" % port,
                       3)
    finally:
        filler.close()
        lsock.close()


def test_502_connection_refused():
    port = closed_port()
    with Cistern(remap=["map http://m.test/ http://127.0.0.1:%d/"
                        % port]) as c:
        since = c.log_size()
        with Collector() as coll:
            with coll.case("GET"):
                t0 = time.monotonic()
                with Conn(c.port) as k:
                    r = k.request(req("/x"))
                    expect_eq(r.status, 502, "status")
                    expect(0 < len(r.body) < 512, "short body, got %r"
                           % r.body)
                    # the client connection survives an origin failure
                    r = k.request(req("/y"))
                    expect_eq(r.status, 502, "second status")
                expect(time.monotonic() - t0 < 3, "refusal took too long")
            with coll.case("log"):
                c.wait_log(r"conn \d+.*127\.0\.0\.1:%d" % port, 3, since)
            with coll.case("HEAD"):
                # A 502 to HEAD has no body: the next response on the
                # connection must parse.
                with Conn(c.port) as k:
                    k.send(req("/h", method="HEAD") + req("/g"))
                    rs = k.responses(2, methods=["HEAD", "GET"])
                    expect_eq([r.status for r in rs], [502, 502],
                              "statuses")
                    expect_eq(k.buf[k.pos:], b"", "stray bytes")
                    expect(rs[1].body and b"HTTP/" not in rs[1].body,
                           "body of the GET 502: %r" % rs[1].body)


def test_502_invalid_responses():
    cases = [
        ("garbage", b"HXXP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("no-status", b"hello world\r\n\r\n"),
        ("cl-and-te", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
                      b"0\r\n\r\n"),
        ("two-cl", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                   b"Content-Length: 6\r\n\r\nhello!"),
        ("cl-list", b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n"
                    b"hello!"),
        ("bad-cl", b"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello"),
        ("bad-status", b"HTTP/1.1 2000 OK\r\nContent-Length: 2\r\n\r\nok"),
        ("empty", b""),
    ]
    with Origin() as o, mapped(o) as c:
        with Collector() as coll:
            for name, raw_resp in cases:
                with coll.case(name):
                    o.script("/" + name, [{"raw": raw_resp}])
                    with Conn(c.port) as k:
                        r = k.request(req("/" + name))
                        expect_eq(r.status, 502, "status (body %r)"
                                  % r.body)
                        expect(b"hello" not in r.body, "origin bytes "
                               "reached the client")
                        # the client connection is still usable
                        r = k.request(req("/ok"))
                        expect_eq(r.status, 200, "next request")


@timeout(60)
def test_504_origin_never_answers():
    with Origin() as o, mapped(o, records={
            "proxy.config.http.transaction_no_activity_timeout_out": 1}) as c:
        t0 = time.monotonic()
        with Conn(c.port, timeout=10) as k:
            r = k.request(req("/hang"))
            took = time.monotonic() - t0
            expect_eq(r.status, 504, "status")
            expect(0 < len(r.body) < 512, "short body")
            expect(0.8 < took < 4, "504 after %.1fs (timeout 1 s)" % took)
        c.wait_log(r"conn \d+: origin 127\.0\.0\.1:%d" % o.port, 3)
        wait_for(lambda: any(x["end"] == "peer-eof" for x in o.conns()), 3,
                 what="the origin to see its hung connection closed")
        # After the head, silence cuts the client (no complete-looking
        # response).
        with Conn(c.port, timeout=10) as k:
            k.send(req("/stall/100000"))
            expect(k.closed_within(5), "client not cut after the origin "
                   "went silent mid-body")
            rs = parse_responses(k.buf + b"", strict=False, eof=False)
            got = len(k.buf)
            expect(got < 100000, "got %d bytes" % got)
            expect(not rs, "a complete response reached the client: %r"
                   % rs)


def test_origin_closes_mid_body_truncates_client():
    with Origin() as o, mapped(o) as c:
        # curl: error 18 (partial file)
        r = curl([c.url("/close-mid-body/100000"), "-H", "Host: m.test"])
        expect_eq(r.rc, 18, "curl rc (%s)" % r.stderr)
        expect(len(r.body) < 100000, "got the whole body?")
        # raw, Content-Length: fewer bytes, then close
        with Conn(c.port) as k:
            k.send(req("/close-mid-body/100000"))
            expect(k.closed_within(5), "client connection left open")
            he = k.buf.find(b"\r\n\r\n")
            expect(he > 0, "no head: %r" % k.buf[:100])
            expect_in(b"Content-Length: 100000", k.buf[:he], "head")
            expect_eq(len(k.buf) - he - 4, 50000, "body bytes received")
        # raw, chunked: no last chunk
        o.script("/chunk-cut", [{"raw": b"HTTP/1.1 200 OK\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nhello\r\n"}])
        with Conn(c.port) as k:
            k.send(req("/chunk-cut"))
            expect(k.closed_within(5), "client connection left open")
            expect(b"hello" in k.buf, "the chunk that arrived: %r" % k.buf)
            expect(not k.buf.endswith(b"0\r\n\r\n"),
                   "a truncated chunked body was terminated: %r" % k.buf)


def test_broken_body_right_behind_the_head_cuts_client():
    # Head and first body bytes leave in one write; when those bytes are
    # already broken (bad chunk framing) or the origin closes short, the
    # client still gets the head, and then the cut, never a complete-looking
    # response.
    with Origin() as o, mapped(o) as c:
        o.script("/badchunk", [{"raw": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                                b"chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
                                "close": True}])
        o.script("/short", [{"raw": b"HTTP/1.1 200 OK\r\nContent-Length: 10"
                             b"\r\n\r\nabc", "close": True}])
        with Collector() as coll:
            for path, tail in (("/badchunk", b"\r\n\r\n"), ("/short", b"abc")):
                with coll.case(path):
                    data, closed = raw(c.port, req(path), timeout=5)
                    expect(closed, "connection left open")
                    expect(data.startswith(b"HTTP/1.1 200 OK\r\n"),
                           "no head: %r" % data[:80])
                    expect(data.endswith(tail), "cut at the wrong place: %r"
                           % data[-40:])


def test_origin_closes_mid_body_http10_client_sees_reset():
    # To an HTTP/1.0 client a de-chunked or close-delimited body ends with
    # the close, so a truncated one looks complete unless the connection
    # is reset.  The client must see the reset.
    with Origin() as o, mapped(o) as c:
        o.script("/chunk-cut", [{"raw": b"HTTP/1.1 200 OK\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nhello\r\n"}])
        with Conn(c.port) as k:
            k.send(req("/chunk-cut", version="HTTP/1.0"))
            expect(k.closed_within(5), "client connection left open")
            expect(k.reset, "truncated de-chunked body ended with a clean "
                   "close (looks complete to an HTTP/1.0 client): %r"
                   % k.buf)


def test_origin_reset_mid_close_delimited_body():
    # A close-delimited body that the origin RESETS midway is truncated;
    # a clean close to the client would make it look complete.  The
    # client must see a reset, or (if re-framed) a chunked body without
    # its last chunk.
    with Origin() as o, mapped(o) as c:
        o.script("/rst", [{"raw": b"HTTP/1.1 200 OK\r\nConnection: close"
                           b"\r\n\r\n" + b"x" * 5000,
                           "reset_after_ms": 300}])
        with Collector() as coll:
            for version in ("HTTP/1.1", "HTTP/1.0"):
                with coll.case(version):
                    with Conn(c.port) as k:
                        k.send(req("/rst", version=version))
                        expect(k.closed_within(5), "connection left open")
                        he = k.buf.find(b"\r\n\r\n")
                        chunked = he > 0 and b"chunked" in k.buf[:he].lower()
                        if chunked:
                            expect(not k.buf.endswith(b"0\r\n\r\n"),
                                   "truncated body was terminated")
                        else:
                            expect(k.reset, "truncated close-delimited "
                                   "body ended with a clean close: %r"
                                   % k.buf[:200])


def test_client_gone_mid_response_releases_origin():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            k.send(req("/stall/200000"))
            wait_for(lambda: k._recv_some(0.1) is None or
                     b"\r\n\r\n" in k.buf, 5, what="the response head")
            expect(k.buf.startswith(b"HTTP/1.1 200"), "head %r" % k.buf[:80])
        # The client is gone: the origin must see its connection closed.
        conns = wait_for(lambda: (lambda cs: cs if cs and all(
            x["closed"] for x in cs) else None)(o.conns()), 5,
            what="the origin connection to be closed (%r)" % o.conns())
        # Closed either way counts: unread bytes in our socket buffer turn
        # the close into a reset, which is still a release.
        expect(len(conns) == 1 and conns[0]["end"] in ("peer-eof", "peer-reset"),
               "how it ended: %r" % conns)
        # And the daemon is fine afterwards.
        with Conn(c.port) as k:
            expect_eq(k.request(req("/ok")).status, 200, "next request")


def test_client_gone_mid_large_response_releases_origin():
    # Same, with an origin that keeps sending (a big body): the daemon must
    # neither keep reading it nor hold the connection.
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:
            k.send(req("/stream/%d" % (200 * MB)))
            wait_for(lambda: k._recv_some(0.1) is None or
                     len(k.buf) > 100000, 5, what="some body bytes")
        conns = wait_for(lambda: (lambda cs: cs if cs and all(
            x["closed"] for x in cs) else None)(o.conns()), 5,
            what="the origin connection to be closed")
        expect(conns[0]["end"] in ("peer-reset", "error", "peer-eof"),
               "ended %r" % conns[0]["end"])


# ---------------------------------------------------------------------------
# Pipelining, memory, concurrency

def test_pipelined_requests_to_slow_origin_stay_in_order():
    with Origin() as o, mapped(o) as c:
        with Conn(c.port, timeout=4) as k:
            k.send(req("/delay/700/a") + req("/delay/0/b")
                   + req("/delay/300/c", method="POST", body=b"cc")
                   + req("/delay/100/chunked/3000") + req("/delay/0/d"))
            rs = k.responses(5)
        expect_eq([r.body for r in rs[:3]],
                  [b"GET /delay/700/a\n", b"GET /delay/0/b\n",
                   b"POST /delay/300/c\n"], "first three answers in order")
        expect_eq(rs[3].body, pattern(3000), "fourth (chunked)")
        expect_eq(rs[4].body, b"GET /delay/0/d\n", "fifth")
        expect_eq([x["path"] for x in o.requests()],
                  ["/delay/700/a", "/delay/0/b", "/delay/300/c",
                   "/delay/100/chunked/3000", "/delay/0/d"], "origin order")


def test_pipelined_after_error_and_simple():
    with Origin() as o, mapped(o) as c:
        o.script("/bad", [{"raw": b"garbage\r\n\r\n"}])
        with Collector() as coll:
            for name, paths, want in (
                    ("two", ["/a", "/b"], [200, 200]),
                    ("after-502", ["/bad", "/b"], [502, 200]),
                    ("after-404", ["/nomatch", "/b"], [404, 200])):
                with coll.case(name):
                    data = b"".join(req(p, host="x.test" if p == "/nomatch"
                                        else "m.test") for p in paths)
                    with Conn(c.port, timeout=3) as k:
                        k.send(data)
                        rs = k.responses(len(paths))
                        expect_eq([r.status for r in rs], want, "statuses")
                        expect_eq(rs[-1].body, b"GET /b\n", "last body")


@timeout(90)
def test_100mb_response_to_paused_client_bounded_memory():
    n = 100 * MB
    with Origin() as o, mapped(o) as c:
        with Conn(c.port) as k:         # warm up
            k.request(req("/stream/1000000"))
        idle = c.rss_anon()
        s = socket.create_connection(("127.0.0.1", c.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
        s.sendall(req("/stream/%d" % n))
        peak = idle
        t_end = time.monotonic() + 2.0
        while time.monotonic() < t_end:         # the client pauses
            peak = max(peak, c.rss_anon())
            time.sleep(0.05)
        paused_peak = peak
        # now read it all, checking every byte
        s.settimeout(20)
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            expect(d, "closed before the head")
            buf += d
        he = buf.index(b"\r\n\r\n")
        expect(buf.startswith(b"HTTP/1.1 200"), "head %r" % buf[:100])
        expect_in(b"Content-Length: %d" % n, buf[:he], "head")
        got = 0
        pending = buf[he + 4:]
        checks = 0
        bad = None
        while True:
            if pending:
                if bad is None and pending != pattern(len(pending), got):
                    bad = got
                got += len(pending)
            if got >= n:
                break
            checks += 1
            if checks % 200 == 0:
                peak = max(peak, c.rss_anon())
            pending = s.recv(1 << 20)
            if not pending:
                break
        s.close()
        expect_eq(got, n, "body bytes received")
        expect(bad is None, "body differs from the origin's at byte %s"
               % bad)
        note("100 MB: idle %.1f MB, paused peak %.1f MB, peak %.1f MB"
             % (idle / MB, paused_peak / MB, peak / MB))
        expect(paused_peak - idle < 20 * MB,
               "RssAnon grew by %.1f MB while the client paused (idle "
               "%.1f MB)" % ((paused_peak - idle) / MB, idle / MB))
        expect(peak - idle < 20 * MB, "RssAnon grew by %.1f MB during the "
               "transfer" % ((peak - idle) / MB))


def _raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n))
    if want < n:
        raise harness.SkipTest("RLIMIT_NOFILE hard limit %d < %d" % (hard, n))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return soft, hard


@timeout(90)
def test_1000_concurrent_connections():
    nconn = 1000
    old = _raise_nofile(4 * nconn + 200)
    try:
        with Origin() as o, mapped(o) as c:
            socks = []
            try:
                for i in range(nconn):
                    s = socket.create_connection(("127.0.0.1", c.port),
                                                 timeout=20)
                    socks.append(s)
                # every connection is open at once; now each sends a request
                for i, s in enumerate(socks):
                    s.sendall(req("/delay/50/c%d" % i))
                bufs = [b""] * nconn
                done = [False] * nconn
                fd2i = {s.fileno(): i for i, s in enumerate(socks)}
                p = select.poll()
                for s in socks:
                    p.register(s, select.POLLIN)
                deadline = time.monotonic() + 40
                left = nconn
                while left and time.monotonic() < deadline:
                    for fd, ev in p.poll(1000):
                        i = fd2i[fd]
                        d = socks[i].recv(65536)
                        if not d:
                            p.unregister(fd)
                            done[i] = True
                            left -= 1
                            continue
                        bufs[i] += d
                        rs, _, err = harness._parse(bufs[i], None, False)
                        if rs:
                            p.unregister(fd)
                            done[i] = True
                            left -= 1
                bad = []
                for i in range(nconn):
                    rs = parse_responses(bufs[i], strict=False, eof=False) \
                        if bufs[i] else []
                    want = ("GET /delay/50/c%d\n" % i).encode()
                    if not rs or rs[0].status != 200 or rs[0].body != want:
                        bad.append((i, bufs[i][:80]))
                expect(not bad, "%d of %d connections not answered "
                       "correctly, e.g. %r" % (len(bad), nconn, bad[:5]))
            finally:
                for s in socks:
                    s.close()
            expect_eq(len(o.requests()), nconn, "requests at the origin")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


if __name__ == "__main__":
    harness.main()
