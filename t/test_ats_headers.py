"""t/test_ats_headers.py: the records.config keys that shape the fields
Cistern adds and how it retries origins (issue 18), each against a real
origin (t/origin.py records what reached it):

  proxy.config.http.insert_client_ip, insert_squid_x_forwarded_for,
  insert_forwarded, insert_request_via_str, insert_response_via_str,
  request_via_str, response_via_str, proxy.config.proxy_name,
  response_server_enabled, response_server_str,
  connect_attempts_max_retries, connect_attempts_max_retries_dead_server,
  down_server.cache_time.

Run one test: python3 -B t/test_ats_headers.py test_name
"""

import re
import socket
import threading
import time

import harness
from harness import (Cistern, Collector, Conn, Origin, check_config,
                     expect, expect_eq, expect_in, wait_for)

VERSION_RE = r"Cistern/[0-9][0-9A-Za-z.~+-]*"


def mapped(o, records=None, **kw):
    kw.setdefault("storage", ["cache 64M"])
    return Cistern(records=records,
                   remap=["map http://m.test/ http://%s/" % o.authority], **kw)


def req(path, headers=(), version="HTTP/1.1", host="m.test"):
    lines = ["GET %s %s" % (path, version), "Host: %s" % host] + list(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def get(c, path, headers=(), version="HTTP/1.1", host="m.test"):
    with Conn(c.port) as k:
        return k.request(req(path, headers, version, host))


def stored(c, path):
    """Poll until path is answered as a plain hit (its fill committed: a
    request during the fill is answered from it, "collapsed"); returns
    that answer."""
    def once():
        r = get(c, path)
        cs = r.header("Cache-Status") or ""
        return r if "; hit" in cs and "collapsed" not in cs else None
    return wait_for(once, 10, what="a hit on " + path)


def hall(rec, name):
    return [v for k, v in rec["headers"] if k.lower() == name.lower()]


def last_request(o):
    rs = o.requests()
    expect(rs, "nothing reached the origin")
    return rs[-1]


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------------------
# Client-ip and X-Forwarded-For

def test_insert_client_ip():
    # ATS: 0 none, 1 (default) unless the client sent one, 2 always
    # (the client's replaced).
    cases = (
        (None, [], ["127.0.0.1"]),
        (None, ["Client-ip: 10.9.9.9"], ["10.9.9.9"]),
        (1, [], ["127.0.0.1"]),
        (2, [], ["127.0.0.1"]),
        (2, ["Client-IP: 10.9.9.9"], ["127.0.0.1"]),
        (0, [], []),
        (0, ["Client-ip: 10.9.9.9"], ["10.9.9.9"]),
    )
    with Origin() as o, Collector() as coll:
        for mode in (None, 0, 1, 2):
            rec = {} if mode is None else {
                "proxy.config.http.insert_client_ip": mode}
            with mapped(o, rec) as c:
                for m, hs, want in cases:
                    if m != mode:
                        continue
                    with coll.case("mode %r sent %r" % (mode, hs)):
                        o.reset()
                        r = get(c, "/cip", hs)
                        expect_eq(r.status, 200, "status")
                        expect_eq(hall(last_request(o), "Client-ip"), want,
                                  "Client-ip at the origin")


def test_insert_squid_x_forwarded_for():
    with Origin() as o, Collector() as coll:
        with mapped(o) as c:        # default 1: appended
            with coll.case("default"):
                o.reset()
                get(c, "/x", ["X-Forwarded-For: 203.0.113.7"])
                expect_eq(hall(last_request(o), "X-Forwarded-For"),
                          ["203.0.113.7, 127.0.0.1"], "X-Forwarded-For")
        with mapped(o, {"proxy.config.http.insert_squid_x_forwarded_for":
                        0}) as c:
            with coll.case("0, none sent"):
                o.reset()
                get(c, "/x")
                expect_eq(hall(last_request(o), "X-Forwarded-For"), [],
                          "X-Forwarded-For added with the key at 0")
            with coll.case("0, client's kept"):
                o.reset()
                get(c, "/x", ["X-Forwarded-For: 203.0.113.7",
                              "X-Forwarded-For: 198.51.100.2"])
                expect_eq(hall(last_request(o), "X-Forwarded-For"),
                          ["203.0.113.7", "198.51.100.2"],
                          "the client's X-Forwarded-For as sent")


def test_insert_forwarded():
    # ATS's parameter list (| or : between, case and spaces ignored) makes
    # an RFC 7239 Forwarded field, after the client's; "none" (the
    # default) makes none.  by=ip, by=uuid and connection=full are refused.
    with Origin() as o, Collector() as coll:
        with mapped(o) as c:
            with coll.case("default none"):
                o.reset()
                get(c, "/f", ["Forwarded: for=192.0.2.1"])
                expect_eq(hall(last_request(o), "Forwarded"),
                          ["for=192.0.2.1"], "Forwarded with none")
        with mapped(o, {"proxy.config.http.insert_forwarded":
                        "For | by=ServerName:proto|host|connection=std"}) as c:
            with coll.case("for|by=servername|proto|host|connection=std"):
                o.reset()
                get(c, "/f", ["Forwarded: for=192.0.2.1"])
                expect_eq(hall(last_request(o), "Forwarded"),
                          ["for=192.0.2.1", "for=127.0.0.1;by=cistern;"
                           "proto=http;host=m.test;connection=http/1.1"],
                          "Forwarded")
            with coll.case("host:port quoted"):
                o.reset()
                with Conn(c.port) as k:
                    k.request(b"GET /f HTTP/1.0\r\nHost: m.test:80\r\n\r\n")
                expect_eq(hall(last_request(o), "Forwarded"),
                          ['for=127.0.0.1;by=cistern;proto=http;'
                           'host="m.test:80";connection=http/1.0'],
                          "Forwarded")
        with mapped(o, {"proxy.config.http.insert_forwarded":
                        "by=unknown|connection=compact"}) as c:
            with coll.case("by=unknown|connection=compact"):
                o.reset()
                get(c, "/f")
                expect_eq(hall(last_request(o), "Forwarded"),
                          ["by=unknown;connection=http"], "Forwarded")
    with Collector() as coll:
        for bad in ("for|by=uuid", "by=ip", "connection=full", "for|bogus"):
            with coll.case(bad):
                r = check_config(records={
                    "proxy.config.http.insert_forwarded": bad})
                expect(r.rc != 0, "insert_forwarded %s accepted" % bad)
                expect_in("insert_forwarded", r.stderr, "the error names "
                          "the key")


# ---------------------------------------------------------------------------
# Via

def test_request_via_levels():
    base = r"http/1\.1 cistern \(" + VERSION_RE + r"\)"
    with Origin() as o, Collector() as coll:
        with mapped(o) as c:        # default 1
            with coll.case("default 1"):
                o.reset()
                get(c, "/v1", ["Via: 1.0 upstream"])
                via = hall(last_request(o), "Via")
                expect_eq(len(via), 2, "Via lines: %r" % via)
                expect_eq(via[0], "1.0 upstream", "the client's Via first")
                expect(re.fullmatch(base, via[1]), "our Via %r" % via[1])
            with coll.case("HTTP/1.0 client"):
                o.reset()
                get(c, "/v10", version="HTTP/1.0")
                via = hall(last_request(o), "Via")
                expect(re.fullmatch(r"http/1\.0 cistern \(" + VERSION_RE
                                    + r"\)", via[-1]), "our Via %r" % via)
        with mapped(o, {"proxy.config.http.insert_request_via_str": 0}) as c:
            with coll.case("0"):
                o.reset()
                get(c, "/v0", ["Via: 1.0 upstream"])
                expect_eq(hall(last_request(o), "Via"), ["1.0 upstream"],
                          "Via with the key at 0")
        with mapped(o, {"proxy.config.http.insert_request_via_str": 2}) as c:
            with coll.case("2, a miss"):
                o.reset()
                get(c, "/v2")
                via = hall(last_request(o), "Via")
                expect(re.fullmatch(r"http/1\.1 cistern \(" + VERSION_RE
                                    + r" \[uScM\]\)", via[-1]),
                       "level 2 Via %r" % via)
            with coll.case("2, a conditional"):
                o.reset()
                get(c, "/v2c", ["If-Modified-Since: Sun, 06 Nov 1994 "
                                "08:49:37 GMT"])
                via = hall(last_request(o), "Via")
                expect(via and via[-1].endswith("[uIcM])"),
                       "level 2 Via of a conditional %r" % via)
        with mapped(o, {"proxy.config.http.insert_request_via_str": 3,
                        "proxy.config.proxy_name": "edge7",
                        "proxy.config.http.request_via_str": "Edge/2"}) as c:
            with coll.case("3, proxy_name, request_via_str"):
                o.reset()
                get(c, "/v3", ["Cookie: a=b"])
                via = hall(last_request(o), "Via")
                expect_eq(via, ["http/1.1 edge7 (Edge/2 [uCcMs f p eN:t cCMp s ])"],
                          "level 3 Via")
    r = check_config(records={"proxy.config.http.insert_request_via_str": 4})
    expect(r.rc != 0 and "not supported" in r.stderr,
           "level 4 refused: rc %d %r" % (r.rc, r.stderr))


def test_response_via_levels():
    # ATS's default is 0: no Via of ours to the client, on a miss or a hit
    # (the origin's own Via is passed on, and kept with the stored copy).
    path = "/headers?Cache-Control=max-age%3D600&Via=1.1%20origin-cdn"
    with Origin() as o, Collector() as coll:
        with mapped(o) as c:
            with coll.case("default 0"):
                r1 = get(c, path)
                r2 = stored(c, path)
                expect_eq(r1.header_all("Via"), ["1.1 origin-cdn"], "miss Via")
                expect_eq(r2.header_all("Via"), ["1.1 origin-cdn"], "hit Via")
                expect_eq(r1.header("X-Origin-Seq"), r2.header("X-Origin-Seq"),
                          "second answer from the cache")
        with mapped(o, {"proxy.config.http.insert_response_via_str": 1}) as c:
            with coll.case("1"):
                r1 = get(c, path)
                r2 = stored(c, path)
                want = r"http/1\.1 cistern \(" + VERSION_RE + r"\)"
                for what, r in (("miss", r1), ("hit", r2)):
                    via = r.header_all("Via")
                    expect_eq(len(via), 2, "%s Via lines %r" % (what, via))
                    expect_eq(via[0], "1.1 origin-cdn", what + ": origin's")
                    expect(re.fullmatch(want, via[-1]), "%s Via %r"
                           % (what, via))
        with mapped(o, {"proxy.config.http.insert_response_via_str": 2}) as c:
            with coll.case("2"):
                r1 = get(c, path)
                r2 = stored(c, path)
                r3 = get(c, "/nocache")
                expect(r1.header_all("Via")[-1].endswith("[cMsSfW])"),
                       "miss and fill: %r" % r1.header_all("Via"))
                expect(r2.header_all("Via")[-1].endswith("[cHs f ])"),
                       "hit: %r" % r2.header_all("Via"))
                expect(r3.header_all("Via")[-1].endswith("[cMsSf ])"),
                       "miss, not stored: %r" % r3.header_all("Via"))
        with mapped(o, {"proxy.config.http.insert_response_via_str": 3,
                        "proxy.config.http.response_via_str": "Edge/3"}) as c:
            with coll.case("3"):
                r1 = get(c, path)
                stored(c, path)
                r2 = get(c, path, ["If-None-Match: *"])
                expect_eq(r1.header_all("Via")[-1],
                          "http/1.1 cistern (Edge/3 [uScMsSfWpSeN:t cCMp sS])",
                          "miss Via")
                expect_eq(r2.status, 304, "conditional hit")
                expect_eq(r2.header_all("Via")[-1],
                          "http/1.1 cistern (Edge/3 [uIcHs f pNeN:t cCNp s ])",
                          "304 hit Via")
    r = check_config(records={"proxy.config.http.insert_response_via_str": 4})
    expect(r.rc != 0, "level 4 accepted")


# ---------------------------------------------------------------------------
# Server

def test_response_server_enabled_and_str():
    path = "/headers?Cache-Control=max-age%3D600"
    with Origin() as o, Collector() as coll:
        o.script("/bare", [{"raw": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                   b"Connection: close\r\n\r\nok"}])
        with mapped(o) as c:        # default 1: ours replaces the origin's
            with coll.case("default 1"):
                for what, r in (("miss", get(c, path)), ("hit", stored(c, path)),
                                ("local 404", get(c, "/", host="nowhere.test"))):
                    expect_eq(r.header_all("Server"), ["cistern"], what)
        with mapped(o, {"proxy.config.http.response_server_str":
                        "Edge/1.0"}) as c:
            with coll.case("response_server_str"):
                for what, r in (("miss", get(c, path)), ("hit", stored(c, path)),
                                ("local 404", get(c, "/", host="nowhere.test"))):
                    expect_eq(r.header_all("Server"), ["Edge/1.0"], what)
        with mapped(o, {"proxy.config.http.response_server_enabled": 0}) as c:
            with coll.case("0"):
                for what, r in (("miss", get(c, path)), ("hit", stored(c, path))):
                    expect_eq(r.header_all("Server"), ["cistern-test-origin"],
                              what)
                r = get(c, "/", host="nowhere.test")
                expect_eq(r.header_all("Server"), [], "local 404")
        with mapped(o, {"proxy.config.http.response_server_enabled": 2}) as c:
            with coll.case("2"):
                for what, r in (("miss", get(c, path)), ("hit", stored(c, path))):
                    expect_eq(r.header_all("Server"), ["cistern-test-origin"],
                              what)
                r = get(c, "/bare")
                expect_eq(r.body, b"ok", "scripted body")
                expect_eq(r.header_all("Server"), ["cistern"],
                          "an origin without Server")
                r = get(c, "/", host="nowhere.test")
                expect_eq(r.header_all("Server"), ["cistern"], "local 404")


# ---------------------------------------------------------------------------
# Connect retries and down origins

def origin_connects(c):
    return harness.cache_stats(c.port)[
        "proxy.process.http.total_server_connections"]


def attempts_for(c, path="/x"):
    """Connect attempts one request made (the /_stats counter)."""
    before = origin_connects(c)
    r = get(c, path)
    expect_eq(r.status, 502, "status with the origin refusing")
    return origin_connects(c) - before


def dead_daemon(port, records):
    rec = {"proxy.config.http.connect_attempts_timeout": 5}
    rec.update(records)
    c = Cistern(records=rec, workers=1,
                remap=["map http://m.test/ http://127.0.0.1:%d/" % port])
    return c


@harness.timeout(120)
def test_connect_attempts_max_retries():
    port = closed_port()
    with Collector() as coll:
        with dead_daemon(port, {}) as c:
            c.expect_log(r"marked down")
            with coll.case("default: 1 + 3 attempts, then 1 while down"):
                expect_eq(attempts_for(c), 4, "attempts, origin up")
                expect_eq(attempts_for(c), 1, "attempts, origin marked down")
        with dead_daemon(port, {
                "proxy.config.http.connect_attempts_max_retries": 1,
                "proxy.config.http.connect_attempts_max_retries_dead_server": 0,
                "proxy.config.http.down_server.cache_time": 2}) as c:
            c.expect_log(r"marked down")
            with coll.case("1 retry, 0 while down, down for 2 s"):
                expect_eq(attempts_for(c), 2, "attempts")
                expect_eq(attempts_for(c), 0, "attempts while marked down")
                time.sleep(2.5)
                expect_eq(attempts_for(c), 2, "attempts after cache_time")


class TinyOrigin:
    """A listener on a given port answering each connection with one
    200 "ok" and a close (t/origin.py cannot be restarted on a port)."""

    def __init__(self, port):
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.s.bind(("127.0.0.1", port))
        self.s.listen(16)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while True:
            try:
                a, _ = self.s.accept()
            except OSError:
                return
            with a:
                a.settimeout(5)
                try:
                    data = b""
                    while b"\r\n\r\n" not in data:
                        d = a.recv(4096)
                        if not d:
                            break
                        data += d
                    a.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                              b"Connection: close\r\n\r\nok")
                except OSError:
                    pass

    def close(self):
        self.s.shutdown(socket.SHUT_RDWR)
        self.s.close()
        self.t.join(5)


@harness.timeout(120)
def test_down_server_marked_up_by_a_connection():
    # One connection made to a down origin (a dead_server attempt) marks it
    # up: the next failure gets the full 1 + max_retries attempts again.
    port = closed_port()
    with dead_daemon(port, {
            "proxy.config.http.connect_attempts_max_retries": 0,
            "proxy.config.http.connect_attempts_max_retries_dead_server": 2,
            "proxy.config.http.down_server.cache_time": 600}) as c:
        c.expect_log(r"marked down")
        expect_eq(attempts_for(c), 1, "attempts, origin up")
        expect_eq(attempts_for(c), 2, "attempts while marked down")
        t = TinyOrigin(port)
        try:
            r = get(c, "/back")
            expect_eq(r.status, 200, "the origin is back")
            expect_eq(r.body, b"ok", "its body")
        finally:
            t.close()
        expect_eq(attempts_for(c), 1, "attempts once marked up again")


if __name__ == "__main__":
    harness.main()
