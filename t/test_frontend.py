#!/usr/bin/env python3
"""t/test_frontend.py: the HTTP front end, end to end.

Remap answers (redirects, 404, map), RFC 9112 strictness with exact bytes on
raw sockets (status AND close), keep-alive rules, pipelining, HEAD, size
limits, timeouts (slowloris, idle keep-alive, no activity), `cistern -t`,
refusing a second instance, and ab runs.

Every malformed request below is otherwise a valid request for a redirect
rule, so a daemon that ignored the defect would answer 301 and keep the
connection open, and the test would fail.

Run one test: python3 -B t/test_frontend.py test_name
"""

import os
import re
import shutil
import tempfile
import time

import harness
from harness import (Cistern, Conn, Collector, Origin, ab, check_config, curl,
                     expect, expect_eq, parse_responses, raw,
                     run_cistern, timeout, write_confdir)

REMAP = [
    "redirect http://a.test/ http://b.test/new/",
    "redirect_temporary http://t.test/ http://u.test/tmp/",
]

# A valid request that a redirect rule answers with 301.
OK_REQ = b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n"


def daemon(records=None, remap=None, **kw):
    return Cistern(records=records, remap=REMAP + list(remap or []), **kw)


def refused(port, data, status, what=""):
    """Send data on a fresh connection; expect exactly one response with
    `status`, `Connection: close`, and the connection closed."""
    got, closed = raw(port, data, timeout=3)
    expect(got, "%sno response at all (closed=%s)" % (what, closed))
    rs = parse_responses(got)
    expect_eq(len(rs), 1, "%snumber of responses" % what)
    expect_eq(rs[0].status, status, "%sstatus (response %r)" % (what,
                                                               rs[0]))
    expect(rs[0].has_token("Connection", "close"),
           "%sno `Connection: close` in %r" % (what, rs[0].headers))
    expect(closed, "%sconnection not closed after the %d" % (what, status))
    return rs[0]


def answered_301(port, data=OK_REQ):
    with Conn(port) as c:
        r = c.request(data)
        expect_eq(r.status, 301, "control request status")
        return r


# ---------------------------------------------------------------------------
# Remap answers

def test_redirect_301_location_keeps_path_and_query():
    with daemon() as c:
        r = curl([c.url("/x?y"), "-H", "Host: a.test"])
        expect_eq(r.rc, 0, "curl rc (%s)" % r.stderr)
        expect_eq(r.status, 301, "status")
        expect_eq(r.header("Location"), "http://b.test/new/x?y", "Location")
        r = curl([c.url("/deep/er/path.html?q=1&r=%20"), "-H",
                  "Host: a.test"])
        expect_eq(r.header("Location"),
                  "http://b.test/new/deep/er/path.html?q=1&r=%20", "Location")
        r = curl([c.url("/"), "-H", "Host: a.test"])
        expect_eq(r.header("Location"), "http://b.test/new/", "Location /")


def test_redirect_temporary_307():
    with daemon() as c:
        r = curl([c.url("/x?y"), "-H", "Host: t.test"])
        expect_eq(r.status, 307, "status")
        expect_eq(r.header("Location"), "http://u.test/tmp/x?y", "Location")


def test_absolute_form_uses_target_authority():
    # DESIGN: for an absolute-form target the Host header is ignored.
    with daemon() as c:
        with Conn(c.port) as k:
            r = k.request(b"GET http://a.test/x?y HTTP/1.1\r\n"
                          b"Host: nomatch.test\r\n\r\n")
            expect_eq(r.status, 301, "status")
            expect_eq(r.header("Location"), "http://b.test/new/x?y",
                      "Location")
            r = k.request(b"GET http://nomatch.test/x HTTP/1.1\r\n"
                          b"Host: a.test\r\n\r\n")
            expect_eq(r.status, 404, "absolute target without a rule")


def test_no_rule_404():
    with daemon() as c:
        r = curl([c.url("/x"), "-H", "Host: nomatch.test"])
        expect_eq(r.status, 404, "status")
        # a 404 is not a malformed request: the connection stays usable
        with Conn(c.port) as k:
            r = k.request(b"GET /x HTTP/1.1\r\nHost: nomatch.test\r\n\r\n")
            expect_eq(r.status, 404, "raw status")
            r = k.request(OK_REQ)
            expect_eq(r.status, 301, "next request on the same connection")


def test_map_rule_proxies_to_origin():
    # (Was a 502 until proxying landed.)  The front end hands a map rule's
    # request to the origin; the proxy's own suite tests the details.
    with Origin() as o:
        with daemon(remap=["map http://m.test/ http://%s/" % o.authority]) \
                as c:
            r = curl([c.url("/bytes/10?q=1"), "-H", "Host: m.test"])
            expect_eq(r.status, 200, "status (%r)" % r)
            expect_eq(r.body, harness.pattern(10), "body")
            reqs = o.requests()
            expect_eq([(q["method"], q["target"]) for q in reqs],
                      [("GET", "/bytes/10?q=1")], "requests at the origin")


# ---------------------------------------------------------------------------
# Strictness (RFC 9112): status and close, exact bytes

def test_cl_and_te_together_400():
    with daemon() as c:
        refused(c.port, b"POST /x HTTP/1.1\r\nHost: a.test\r\n"
                b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"0\r\n\r\n", 400)


def test_differing_content_lengths_400():
    with daemon() as c, Collector() as col:
        for name, hdr in (
                ("two fields", b"Content-Length: 3\r\nContent-Length: 4\r\n"),
                ("one list", b"Content-Length: 3, 4\r\n")):
            with col.case(name):
                refused(c.port, b"POST /x HTTP/1.1\r\nHost: a.test\r\n" + hdr
                        + b"\r\nabcd", 400)


def test_obs_fold_400():
    with daemon() as c, Collector() as col:
        for name, fold in (("SP", b" baz"), ("HT", b"\tbaz")):
            with col.case(name):
                refused(c.port, b"GET /x HTTP/1.1\r\nHost: a.test\r\n"
                        b"X-Foo: bar\r\n" + fold + b"\r\n\r\n", 400)


def test_whitespace_before_colon_400():
    with daemon() as c, Collector() as col:
        for name, line in (("SP", b"X-Foo : bar"), ("HT", b"X-Foo\t: bar")):
            with col.case(name):
                refused(c.port, b"GET /x HTTP/1.1\r\nHost: a.test\r\n" + line
                        + b"\r\n\r\n", 400)


def test_missing_host_http11_400():
    with daemon() as c:
        refused(c.port, b"GET /x HTTP/1.1\r\nX-Foo: bar\r\n\r\n", 400)


def test_duplicate_host_400():
    with daemon() as c, Collector() as col:
        for ver in (b"1.1", b"1.0"):
            with col.case("HTTP/" + ver.decode()):
                refused(c.port, b"GET /x HTTP/" + ver + b"\r\nHost: a.test\r\n"
                        b"Host: a.test\r\n\r\n", 400)


def test_invalid_host_400():
    with daemon() as c, Collector() as col:
        for host in (b"a b", b"a@b", b"[::1", b"a.test/x", b"a.test:80x"):
            with col.case(repr(host)):
                refused(c.port, b"GET /x HTTP/1.1\r\nHost: " + host
                        + b"\r\n\r\n", 400)


def test_bad_chunk_size_400():
    with daemon() as c:
        refused(c.port, b"POST /x HTTP/1.1\r\nHost: a.test\r\n"
                b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
                400)


def test_chunked_not_final_coding_400():
    with daemon() as c:
        refused(c.port, b"POST /x HTTP/1.1\r\nHost: a.test\r\n"
                b"Transfer-Encoding: chunked, gzip\r\n\r\n3\r\nabc\r\n"
                b"0\r\n\r\n", 400)


def test_unknown_transfer_coding_501():
    # An unknown coding before a final chunked: framed, not implemented.
    # (An unknown coding alone leaves the length unknown: 400, RFC 9112
    # 6.3; test_hostile.py's test_te_final_coding_not_chunked_400.)
    with daemon() as c:
        refused(c.port, b"POST /x HTTP/1.1\r\nHost: a.test\r\n"
                b"Transfer-Encoding: foo, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                501)


def test_invalid_method_token_400():
    with daemon() as c, Collector() as col:
        for m in (b"G@T", b"GE(T", b"G\x01T"):
            with col.case(repr(m)):
                refused(c.port, m + b" /x HTTP/1.1\r\nHost: a.test\r\n\r\n",
                        400)


def test_connect_refused_by_reverse_proxy():
    # remap_required 1 (the default): a reverse proxy opens no tunnel
    # (t/test_tunnel.py has CONNECT as a forward proxy).
    with daemon() as c:
        got, closed = raw(c.port, b"CONNECT a.test:443 HTTP/1.1\r\n"
                          b"Host: a.test:443\r\n\r\n", timeout=3)
        rs = parse_responses(got, strict=False)
        expect(rs, "no response: %r" % got)
        expect_eq(rs[0].status, 403, "status")
        expect(closed, "connection left open")


def test_push_disabled_403():
    # PUSH is off by default (proxy.config.http.push_method_enabled 0): 403,
    # even from loopback, which ip_allow.config lets PUSH.
    with daemon() as c:
        body = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"
        got, closed = raw(c.port, b"PUSH http://a.test/x HTTP/1.1\r\n"
                          b"Host: a.test\r\nContent-Length: %d\r\n\r\n%s"
                          % (len(body), body), timeout=3)
        rs = parse_responses(got, strict=False)
        expect(rs, "no response: %r" % got)
        expect_eq(rs[0].status, 403, "status")


def test_request_line_too_long_414():
    with daemon(records={"proxy.config.http.request_line_max_size": 1024}) \
            as c:
        # just under the limit: answered normally
        answered_301(c.port, b"GET /" + b"a" * 900 + b" HTTP/1.1\r\n"
                     b"Host: a.test\r\n\r\n")
        refused(c.port, b"GET /" + b"a" * 2000 + b" HTTP/1.1\r\n"
                b"Host: a.test\r\n\r\n", 414)


def test_header_section_too_large_431():
    with daemon(records={"proxy.config.http.request_header_max_size": 4096,
                         "proxy.config.http.request_line_max_size": 1024}) \
            as c:
        answered_301(c.port, b"GET /x HTTP/1.1\r\nHost: a.test\r\n"
                     + b"X-Pad: " + b"p" * 2000 + b"\r\n\r\n")
        many = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 100)
                        for i in range(60))
        refused(c.port, b"GET /x HTTP/1.1\r\nHost: a.test\r\n" + many
                + b"\r\n", 431)


# ---------------------------------------------------------------------------
# Keep-alive, pipelining, HEAD

def test_keepalive_http11_default_open():
    with daemon() as c, Conn(c.port) as k:
        r = k.request(OK_REQ)
        expect_eq(r.status, 301, "status")
        expect(not r.has_token("Connection", "close"),
               "HTTP/1.1 response says close: %r" % r.headers)
        expect(k.open_after(0.5), "connection closed after a 1.1 response")
        expect_eq(k.request(OK_REQ).status, 301, "second request")


def test_keepalive_http11_connection_close():
    with daemon() as c, Conn(c.port) as k:
        r = k.request(b"GET /x HTTP/1.1\r\nHost: a.test\r\n"
                      b"Connection: close\r\n\r\n")
        expect_eq(r.status, 301, "status")
        expect(r.has_token("Connection", "close"),
               "no Connection: close in %r" % r.headers)
        expect(k.closed_within(2), "connection not closed")


def test_keepalive_http10_default_close():
    with daemon() as c, Conn(c.port) as k:
        r = k.request(b"GET /x HTTP/1.0\r\nHost: a.test\r\n\r\n")
        expect_eq(r.status, 301, "status")
        expect(k.closed_within(2), "HTTP/1.0 connection not closed")


def test_keepalive_http10_keep_alive():
    with daemon() as c, Conn(c.port) as k:
        req = b"GET /x HTTP/1.0\r\nHost: a.test\r\nConnection: keep-alive\r\n\r\n"
        r = k.request(req)
        expect_eq(r.status, 301, "status")
        expect(r.has_token("Connection", "keep-alive"),
               "no Connection: keep-alive in %r" % r.headers)
        expect(k.open_after(0.5), "connection closed")
        r = k.request(req)
        expect_eq(r.status, 301, "second request")
        # without the token again: closes
        r = k.request(b"GET /x HTTP/1.0\r\nHost: a.test\r\n\r\n")
        expect_eq(r.status, 301, "third request")
        expect(k.closed_within(2), "connection not closed after plain 1.0")


def test_pipelined_answered_in_order():
    with daemon() as c, Conn(c.port) as k:
        k.send(b"GET /one?1 HTTP/1.1\r\nHost: a.test\r\n\r\n"
               b"HEAD /two HTTP/1.1\r\nHost: t.test\r\n\r\n"
               b"GET /three HTTP/1.1\r\nHost: nomatch.test\r\n"
               b"Connection: close\r\n\r\n")
        rs = k.responses(3, methods=["GET", "HEAD", "GET"])
        expect_eq([r.status for r in rs], [301, 307, 404], "statuses")
        expect_eq(rs[0].header("Location"), "http://b.test/new/one?1",
                  "first Location")
        expect_eq(rs[1].header("Location"), "http://u.test/tmp/two",
                  "second Location")
        expect(k.closed_within(2), "not closed after Connection: close")
        expect_eq(k.buf[k.pos:], b"", "bytes after the third response")


def test_pipelined_in_tiny_pieces():
    # The same three requests dribbled in 7-byte pieces: the parser must
    # resume across reads at any byte.
    with daemon() as c, Conn(c.port) as k:
        data = (b"GET /one HTTP/1.1\r\nHost: a.test\r\n\r\n"
                b"GET /two HTTP/1.1\r\nHost: t.test\r\n\r\n"
                b"GET /three HTTP/1.1\r\nHost: a.test\r\n\r\n")
        for i in range(0, len(data), 7):
            k.send(data[i:i + 7])
        rs = k.responses(3)
        expect_eq([r.header("Location") for r in rs],
                  ["http://b.test/new/one", "http://u.test/tmp/two",
                   "http://b.test/new/three"], "Locations")


def test_head_has_length_and_no_body():
    with daemon() as c, Conn(c.port) as k:
        # HEAD then GET pipelined: if HEAD carried a body, the GET's
        # response would not parse.
        k.send(b"HEAD /x HTTP/1.1\r\nHost: a.test\r\n\r\n"
               b"GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n")
        h, g = k.responses(2, methods=["HEAD", "GET"])
        expect_eq(h.status, 301, "HEAD status")
        expect_eq(g.status, 301, "GET status")
        expect_eq(h.header("Location"), g.header("Location"), "Location")
        cl = g.header("Content-Length")
        expect(cl is not None, "GET response has no Content-Length")
        expect_eq(int(cl), len(g.body), "GET Content-Length vs body")
        expect_eq(h.header("Content-Length"), cl, "HEAD Content-Length")
        expect(k.open_after(0.3), "closed after HEAD+GET")
        expect_eq(k.buf[k.pos:], b"", "stray bytes after the responses")


# ---------------------------------------------------------------------------
# Timeouts

@timeout(60)
def test_slowloris_cut_at_header_timeout():
    hdr_to = 2
    with daemon(records={"proxy.config.cistern.request_header_timeout":
                         hdr_to,
                         "proxy.config.http.transaction_no_activity_timeout_in":
                         30,
                         "proxy.config.http.keep_alive_no_activity_timeout_in":
                         30},
                workers=1) as c:
        drip = b"X-Drip: " + b"d" * 100
        conns = []
        t0 = time.monotonic()
        for _ in range(5):
            k = Conn(c.port)
            k.send(b"GET /x HTTP/1.1\r\nHost: a.test\r\n")
            conns.append([k, 0, None])
        normal_done = None
        limit = hdr_to + 1.5
        while any(e[2] is None for e in conns):
            now = time.monotonic() - t0
            expect(now < limit + 1, "slowloris connections still open after "
                   "%.1fs (request_header_timeout %ds)" % (now, hdr_to))
            if normal_done is None and now > hdr_to / 2:
                s = time.monotonic()
                answered_301(c.port)
                normal_done = time.monotonic() - s
            for e in conns:
                if e[2] is not None:
                    continue
                k = e[0]
                try:
                    k.send(drip[e[1] % len(drip):e[1] % len(drip) + 1])
                    e[1] += 1
                except OSError:
                    e[2] = time.monotonic() - t0
                    continue
                if k.closed_within(0.1):
                    e[2] = time.monotonic() - t0
        expect(normal_done is not None and normal_done < 1.0,
               "a normal client waited %r s during the slowloris" %
               normal_done)
        for k, n, when in conns:
            expect(hdr_to - 0.3 <= when <= limit,
                   "dripping connection cut after %.2fs, want about %ds"
                   % (when, hdr_to))
            got = k.buf
            if got:
                rs = parse_responses(got, strict=False)
                expect(rs and rs[0].status == 408,
                       "cut with something other than a 408: %r" % got[:200])
            k.close()


def test_idle_keepalive_timeout():
    with daemon(records={"proxy.config.http.keep_alive_no_activity_timeout_in":
                         1,
                         "proxy.config.cistern.request_header_timeout": 30,
                         "proxy.config.http.transaction_no_activity_timeout_in":
                         30}) as c, Conn(c.port) as k:
        expect_eq(k.request(OK_REQ).status, 301, "status")
        t0 = time.monotonic()
        expect(k.closed_within(4), "idle keep-alive connection still open "
               "after 4s (timeout 1s)")
        el = time.monotonic() - t0
        expect(0.7 <= el <= 2.5, "idle connection closed after %.2fs, want "
               "about 1s" % el)
        expect_eq(k.buf[k.pos:], b"", "bytes sent on an idle close")


def test_no_activity_mid_request_timeout():
    with daemon(records={"proxy.config.http.transaction_no_activity_timeout_in":
                         1,
                         "proxy.config.cistern.request_header_timeout": 30,
                         "proxy.config.http.keep_alive_no_activity_timeout_in":
                         30}) as c, Conn(c.port) as k:
        t0 = time.monotonic()
        k.send(b"GET /x HTTP/1.1\r\nHost: a.te")
        expect(k.closed_within(4), "stalled request still open after 4s "
               "(transaction_no_activity_timeout_in 1)")
        el = time.monotonic() - t0
        expect(0.7 <= el <= 2.5, "stalled request cut after %.2fs, want "
               "about 1s" % el)
        if k.buf:
            rs = parse_responses(k.buf, strict=False)
            expect(rs and rs[0].status == 408, "answer to a stalled request "
                   "is not a 408: %r" % k.buf[:200])


# ---------------------------------------------------------------------------
# Configuration check and instances

BASE = ["CONFIG proxy.config.http.server_ports STRING 0",
        "CONFIG proxy.config.cistern.run_dir STRING run",
        "CONFIG proxy.config.log.logfile_dir STRING log"]


def test_config_check_good():
    r = check_config(remap=REMAP + ["map http://m.test/ http://127.0.0.1:9/"])
    expect_eq(r.rc, 0, "exit status of -t on a good config (stderr %r)"
              % r.stderr)


def test_config_check_bad_records():
    r = check_config(records_text=BASE + [
        "CONFIG proxy.config.cistern.workers STRING two",        # line 4
        "CONFIG proxy.config.http.request_line_max_size INT 4096",
        "CONFIG proxy.config.http.keep_alive_no_activity_timeout_in BOGUS 1",
    ], remap=REMAP)
    expect_eq(r.rc, 1, "exit status (stderr %r)" % r.stderr)
    for line in (4, 6):
        expect(re.search(r"records\.config:%d: \S" % line, r.stderr),
               "no `records.config:%d: message` in stderr %r"
               % (line, r.stderr))
    expect(not re.search(r"records\.config:5:", r.stderr),
           "good line 5 reported: %r" % r.stderr)


def test_config_check_bad_remap():
    r = check_config(remap=[
        "redirect http://a.test/ http://b.test/",               # line 1
        "frobnicate http://x.test/ http://y.test/",             # line 2
        "# a comment",
        "map http://z.test/",                                   # line 4
    ])
    expect_eq(r.rc, 1, "exit status (stderr %r)" % r.stderr)
    for line in (2, 4):
        expect(re.search(r"remap\.config:%d: \S" % line, r.stderr),
               "no `remap.config:%d: message` in stderr %r"
               % (line, r.stderr))


def test_second_instance_same_run_dir_refused():
    with daemon() as c:
        # The refusal may be logged to the shared error log.
        c.expect_log(r"(?i)lock|already running")
        r = run_cistern(["-c", c.confdir, "-f"], timeout=10)
        expect(not r.timed_out, "second instance kept running")
        expect(r.rc != 0, "second instance exit status 0")
        expect(re.search(r"(?i)lock|already running", r.stdout + r.stderr),
               "no lock/already running message: %r" % r.stderr)
        # the first instance is unharmed
        with open(os.path.join(c.run_dir, "cistern.pid")) as f:
            expect_eq(int(f.read().split()[0]), c.pid, "pid file")
        with open(os.path.join(c.run_dir, "ports")) as f:
            expect_eq([int(x) for x in f.read().split()], c.ports,
                      "ports file")
        answered_301(c.port)


def test_second_instance_same_port_refused():
    with daemon() as c:
        d = tempfile.mkdtemp(prefix="cistern-t-")
        conf = os.path.join(d, "conf")
        write_confdir(conf, records={
            "proxy.config.http.server_ports": str(c.port)}, remap=REMAP)
        r = run_cistern(["-c", conf, "-f"], timeout=10)
        expect(not r.timed_out, "second instance on the same port kept "
               "running")
        expect(r.rc != 0, "second instance exit status 0")
        expect(re.search(r"(?i)in use", r.stdout + r.stderr),
               "no `in use` message: %r" % r.stderr)
        answered_301(c.port)
        shutil.rmtree(d, ignore_errors=True)


def test_sigterm_right_after_start_exits_0():
    # Regression: SIGTERM after the ports file appeared but before every
    # worker reported ready made the master exit 1 ("start failed") instead
    # of 0.  stop() checks the exit status.
    for _ in range(3):
        c = daemon(wait_ready=False)
        c.stop()


# ---------------------------------------------------------------------------
# Load

@timeout(300)
def test_ab_keepalive_100k():
    with daemon(workers=2) as c:
        r = ab(["-k", "-n", "100000", "-c", "100", "-H", "Host: a.test",
                c.url("/x")])
        expect_eq(r.complete, 100000, "Complete requests (%r)" % r.output)
        expect_eq(r.failed, 0, "Failed requests (%r)" % r.output)
        expect_eq(r.non2xx, 100000, "Non-2xx (all are 301)")
        expect(r.keepalive is not None and r.keepalive >= 99000,
               "Keep-Alive requests %r of 100000" % r.keepalive)
        print("    ab -k: %.0f requests/s" % r.rps)


@timeout(300)
def test_ab_no_keepalive_5000():
    with daemon(workers=2) as c:
        r = ab(["-n", "5000", "-c", "50", "-H", "Host: a.test", c.url("/x")])
        expect_eq(r.complete, 5000, "Complete requests (%r)" % r.output)
        expect_eq(r.failed, 0, "Failed requests (%r)" % r.output)
        print("    ab: %.0f requests/s" % r.rps)


if __name__ == "__main__":
    harness.main()
