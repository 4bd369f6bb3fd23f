#!/usr/bin/env python3
"""The seeds' own scenarios, typed as their authors typed them (issue 19).

The PUSH benchmark of ATS PR 7382: records.config and remap.config exactly
as in the PR (only the two port numbers are picked free here), the
generator program (t/seeds/push_gen.c, compiled by the test) piped into
`nc localhost PORT`, then GETs of the object through the other port.  The
PUSH request is in absolute form without a Host line, which ATS accepts;
RFC 9112 3.2 would refuse it, and Cistern follows ATS (cistern.8, "Host").
"""

import os
import shutil
import socket
import subprocess
import tempfile
import time

import harness
from harness import Cistern, Collector, Conn, Origin, ab, expect, \
    expect_eq, is_hit, raw, parse_responses


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def generator(tmp):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise harness.SkipTest("no C compiler")
    exe = os.path.join(tmp, "push_gen")
    subprocess.run([cc, "-O2", "-o", exe,
                    os.path.join(harness.srcdir(), "t", "seeds", "push_gen.c")],
                   check=True)
    return exe


def expected_body(n=65536):
    b = bytearray((ord("a") + (i // 64) % 26) for i in range(n))
    for i in range(63, n, 64):
        b[i] = ord("\n")
    return bytes(b)


def seed_config():
    push_port, get_port = free_port(), free_port()
    records = [
        "CONFIG proxy.config.url_remap.remap_required INT 0",
        "CONFIG proxy.config.http.cache.required_headers INT 0",
        "CONFIG proxy.config.http.push_method_enabled INT 1",
        "CONFIG proxy.config.http.server_ports STRING %d %d"
        % (push_port, get_port),
    ]
    remap = ["map http://localhost:%d http://fakehost" % get_port]
    return push_port, get_port, records, remap


def nc_push(exe, port, half_close):
    """The generator's output through nc; returns nc's stdout.  Without
    -N nc keeps the connection after its input ends (the server decides
    when it closes): read until one whole response is there."""
    need = shutil.which("nc")
    if need is None:
        raise harness.SkipTest("no nc (netcat-openbsd)")
    gen = subprocess.Popen([exe], stdout=subprocess.PIPE)
    args = ["nc"] + (["-N"] if half_close else []) + ["localhost", str(port)]
    nc = subprocess.Popen(args, stdin=gen.stdout, stdout=subprocess.PIPE)
    gen.stdout.close()
    out = b""
    deadline = time.time() + 20
    os.set_blocking(nc.stdout.fileno(), False)
    while time.time() < deadline:
        try:
            d = nc.stdout.read()
        except BlockingIOError:
            d = None
        if d:
            out += d
            rs = parse_responses(out, eof=False)
            if rs:
                break
        elif d == b"" and nc.poll() is not None:
            break
        time.sleep(0.02)
    nc.kill()
    nc.wait()
    gen.wait()
    return out


def test_ats_pr7382_push_then_get_is_a_hit():
    tmp = tempfile.mkdtemp(prefix="cistern-seed-")
    try:
        exe = generator(tmp)
        push_port, get_port, records, remap = seed_config()
        with Cistern(records=records, remap=remap, storage=["cache 64M"]) as c, \
                Collector() as col:
            out = nc_push(exe, push_port, half_close=False)
            rs = parse_responses(out, eof=False)
            expect(rs, "no response to the PUSH: %r" % out[:200])
            expect_eq(rs[0].status, 201, "PUSH status")
            want = expected_body()
            for i in range(3):
                with col.case("GET %d" % i):
                    r = harness.one_request(get_port, "GET", "/fake",
                                            host="localhost:%d" % get_port)
                    expect(r is not None, "no complete response")
                    expect_eq(r.status, 200, "status")
                    expect(r.body == want, "body differs from the pushed one "
                           "(%d bytes)" % len(r.body))
                    expect(is_hit(r), "not a hit: Cache-Status %r"
                           % r.header("Cache-Status"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_push_with_half_close_gets_its_whole_answer():
    """nc -N shuts its side down as soon as its input ends, as many
    scripts do: the answer still comes, then the close."""
    tmp = tempfile.mkdtemp(prefix="cistern-seed-")
    try:
        exe = generator(tmp)
        push_port, get_port, records, remap = seed_config()
        with Cistern(records=records, remap=remap, storage=["cache 64M"]):
            out = nc_push(exe, push_port, half_close=True)
            rs = parse_responses(out, eof=False)
            expect(rs, "no response to the half-closed PUSH: %r" % out[:200])
            expect_eq(rs[0].status, 201, "PUSH status")
            r = harness.one_request(get_port, "GET", "/fake",
                                    host="localhost:%d" % get_port)
            expect(r is not None and r.body == expected_body(),
                   "the object pushed by a half-closed client is not served")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_host_rules():
    """Absolute form without Host: accepted (as ATS).  Origin form without
    Host, two Hosts, or an invalid Host: 400 as before."""
    push_port, get_port, records, remap = seed_config()
    with Cistern(records=records, remap=remap, storage=["cache 64M"]) as c, \
            Collector() as col:
        with col.case("absolute form, no Host"):
            body = (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                    b"Cache-Control: max-age=60\r\n\r\nok")
            data, _ = raw(c.port, b"PUSH http://fakehost/x HTTP/1.1\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n"
                          % len(body) + body)
            expect_eq(parse_responses(data)[0].status, 201, "status")
        for name, req in (
                ("origin form, no Host", b"GET /x HTTP/1.1\r\n\r\n"),
                ("absolute form, two Hosts",
                 b"GET http://fakehost/x HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n"),
                ("absolute form, bad Host",
                 b"GET http://fakehost/x HTTP/1.1\r\nHost: a b\r\n\r\n")):
            with col.case(name):
                data, _ = raw(c.port, req)
                expect_eq(parse_responses(data)[0].status, 400, "status")


# ---------------------------------------------------------------------------
# The forward-proxy benchmark of the ATS wiki: a forward proxy that caches.

FORWARD = {"proxy.config.url_remap.remap_required": 0}
# The origin is on 127.0.0.1, which a forward proxy refuses to reach unless
# a destination rule opens it.
FORWARD_TO_LOOPBACK = ["src_ip=127.0.0.1 action=ip_allow method=ALL",
                       "dest_ip=127.0.0.1 action=ip_allow method=ALL"]
CACHEABLE = "/headers/bytes/1024?Cache-Control=max-age%3D600"


def test_forward_proxy_caches_ab_x():
    """ab -X through the proxy: the origin sees one request of 2,000."""
    with Origin() as o, Cistern(records=FORWARD, storage=["cache 64M"],
                                      ip_allow=FORWARD_TO_LOOPBACK) as c:
        url = "http://%s%s" % (o.authority, CACHEABLE)
        r = ab(["-X", "127.0.0.1:%d" % c.port, "-k", "-c", "10", "-n", "2000",
                url])
        expect_eq(r.failed, 0, "ab failed requests")
        expect_eq(r.non2xx, 0, "ab non-2xx responses")
        n = len(o.requests())
        expect(n <= 2, "the origin saw %d requests of 2000 (at most one per "
               "worker's first miss expected; collapsed: 1)" % n)


def test_forward_proxy_cache_follows_rfc9111():
    """Forward-proxied responses are stored under the same rules: no-store
    is not stored, Vary keys variants, the key is the absolute URL (scheme,
    host, port, path, query)."""
    with Origin() as o, Cistern(records=FORWARD, storage=["cache 64M"],
                                      ip_allow=FORWARD_TO_LOOPBACK) as c, \
            Collector() as col:
        base = "http://%s" % o.authority

        def get(path, headers=""):
            with Conn(c.port) as k:
                return k.request(("GET %s%s HTTP/1.1\r\nHost: x.test\r\n%s\r\n"
                                  % (base, path, headers)).encode())
        with col.case("fresh object: second GET is a hit"):
            get(CACHEABLE)
            r = get(CACHEABLE)
            expect(is_hit(r), "not a hit: %r" % r.header("Cache-Status"))
        with col.case("query is part of the key"):
            r = get(CACHEABLE + "&v=2")
            expect(not is_hit(r), "another query served from the cache")
        with col.case("no-store is not stored"):
            p = "/headers/bytes/10?Cache-Control=no-store"
            get(p)
            r = get(p)
            expect(not is_hit(r), "no-store response served from the cache")
        with col.case("Vary"):
            p = ("/headers/echo?Cache-Control=max-age%3D600&Vary=X-Lang")
            a = get(p, "X-Lang: en\r\n")
            b = get(p, "X-Lang: fr\r\n")
            expect(not is_hit(b), "a different X-Lang was a hit")
            a2 = get(p, "X-Lang: en\r\n")
            expect(is_hit(a2), "the same X-Lang was not a hit")
            expect_eq(a2.body, a.body, "variant body")
        with col.case("PURGE of the absolute URL"):
            with Conn(c.port) as k:
                r = k.request(("PURGE %s%s HTTP/1.1\r\nHost: x\r\n\r\n"
                               % (base, CACHEABLE)).encode())
            expect_eq(r.status, 200, "PURGE status")
            r = get(CACHEABLE)
            expect(not is_hit(r), "hit after PURGE")


def own_address():
    """A non-loopback IPv4 address of this machine (the source address of
    a route to a documentation address), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
        a = s.getsockname()[0]
        return None if a.startswith("127.") else a
    except OSError:
        return None
    finally:
        s.close()


def test_forward_proxy_never_reaches_the_machine_itself():
    """Without a destination rule, a forward-proxied request to loopback,
    "this host", link-local or the proxy's own addresses gets 403 and
    nothing is connected; remapped requests to the same origin are unaffected, and
    a dest_ip= rule opens an address."""
    own = own_address()
    with Origin() as o, Cistern(records=FORWARD, storage=["cache 64M"],
                                remap=["map http://m.test/ http://%s/"
                                       % o.authority]) as c, \
            Collector() as col:
        for name, target in (
                ("loopback", "http://%s/x" % o.authority),
                ("localhost", "http://localhost:%d/x" % o.port),
                ("127.0.0.2", "http://127.0.0.2:%d/x" % o.port),
                ("0.0.0.0", "http://0.0.0.0:%d/x" % o.port),
                ("IPv6 loopback", "http://[::1]:%d/x" % o.port),
                ("IPv4-mapped", "http://[::ffff:127.0.0.1]:%d/x" % o.port),
                ("link-local", "http://169.254.169.254/latest/meta-data/")
            ) + ((("the machine's own address",
                   "http://%s:%d/x" % (own, o.port)),) if own else ()):
            with col.case(name):
                with Conn(c.port) as k:
                    r = k.request(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n"
                                   % target).encode())
                expect_eq(r.status, 403, "status")
        with col.case("a remapped request to the same origin"):
            with Conn(c.port) as k:
                r = k.request(b"GET /y HTTP/1.1\r\nHost: m.test\r\n\r\n")
            expect_eq(r.status, 200, "status")
        expect_eq([x["target"] for x in o.requests()], ["/y"],
                  "what reached the origin")
    with Origin() as o, Cistern(records=FORWARD,
                                ip_allow=FORWARD_TO_LOOPBACK) as c:
        with Conn(c.port) as k:
            r = k.request(("GET http://%s/z HTTP/1.1\r\nHost: x\r\n\r\n"
                           % o.authority).encode())
        expect_eq(r.status, 200, "status with a dest_ip rule for 127.0.0.1")


def test_heuristic_lm_factor():
    """proxy.config.http.cache.heuristic_lm_factor (ATS's default 0.10)
    sets the heuristic lifetime of a response with only Last-Modified: a
    Last-Modified 100,000 s old gives 10,000 s by default, 50,000 s at
    0.5 (the hit's Cache-Status says the ttl left)."""
    import email.utils
    import urllib.parse
    with Collector() as col:
        for factor, want in ((None, 10000), ("0.5", 50000), ("0", 0)):
            # made per case: a Last-Modified made once grows older while
            # the cases run, and at 0.5 every second of it is half a second
            # of lifetime (a loaded machine saw 50001)
            lm = email.utils.formatdate(time.time() - 100000, usegmt=True)
            path = "/headers?" + urllib.parse.urlencode({"Last-Modified": lm})
            recs = {"proxy.config.http.cache.heuristic_min_lifetime": 0,
                    "proxy.config.http.cache.heuristic_max_lifetime": 86400}
            if factor is not None:
                recs["proxy.config.http.cache.heuristic_lm_factor"] = \
                    ("FLOAT", factor)
            with col.case("factor %s" % factor), Origin() as o, \
                    Cistern(records=recs, storage=["cache 64M"],
                            remap=["map http://h.test/ http://%s/"
                                   % o.authority]) as c:
                harness.one_request(c.port, "GET", path, host="h.test")
                r = harness.one_request(c.port, "GET", path, host="h.test")
                cs = r.header("Cache-Status") or ""
                if want == 0:
                    expect(not is_hit(r), "a zero lifetime was a hit: %r" % cs)
                    continue
                expect(is_hit(r), "not a hit: %r" % cs)
                ttl = int(cs.split("ttl=")[1].split(";")[0])
                expect(want - 30 <= ttl <= want + 2, "ttl %d, expected about %d"
                       % (ttl, want))


if __name__ == "__main__":
    harness.main()
