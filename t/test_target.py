#!/usr/bin/env python3
"""t/test_target.py: the request-target (issue 16, findings 8 and 11).

What a client writes after the method decides the remap rule, the cache key
and the path the origin is sent, so every spelling of one path must give
the same three, and no spelling may reach an origin outside the prefix its
rule maps:

- dot segments ("/pre/../x", "%2e%2e", ".%2E", "/./", a trailing "/..")
  are removed (RFC 3986 5.2.4) before remap, and the origin is sent the
  normalised path;
- what cannot be normalised safely is refused with 400: "..%2F", "..%5C",
  "..;x" (origins that decode %2F or strip path parameters would climb
  out), a backslash, a malformed or NUL percent-encoding, a fragment,
  bytes outside visible ASCII;
- the cache key is the normalised path: spellings share one object, and a
  raw spelling can never fill the normalised key with another resource;
- "GET http://host?q" is path "/" with query "?q", "OPTIONS *" is answered
  by Cistern itself (200 with Allow);
- a from-path not ending in '/' cannot glue the rest into a dot segment of
  the to-path ("map http://a/pre http://o/pub/" and "/pre..").
"""
import harness
from harness import (Cistern, Conn, Origin, expect, expect_eq, expect_body,
                     is_hit, raw, parse_responses, seeded)


def _get(port, target, host="m.test", method="GET"):
    """One request on its own connection: (response or None, closed)."""
    data, closed = raw(port, b"%s %s HTTP/1.1\r\nHost: %s\r\n"
                       b"Connection: close\r\n\r\n"
                       % (method.encode(), target, host.encode()), timeout=3)
    rs = parse_responses(data, methods=[method], strict=False)
    return (rs[0] if rs else None), closed


def _targets(origin):
    return [r["target"] for r in origin.requests()]


def test_dot_segments_never_leave_the_prefix():
    # Finding 8: "/pre/../secret" reached the /pre/ origin as
    # "/pub/../secret", which the origin resolves to its own /secret.
    with Origin() as pub, Origin() as root, Cistern(
            remap=["map http://m.test/pre/ http://%s/pub/" % pub.authority,
                   "map http://m.test/ http://%s/root/" % root.authority]) as c:
        cases = [
            (b"/pre/../secret", "root", "/root/secret"),
            (b"/pre/%2e%2e/secret", "root", "/root/secret"),
            (b"/pre/%2E%2E/secret", "root", "/root/secret"),
            (b"/pre/.%2e/secret", "root", "/root/secret"),
            (b"/pre/%2e./secret", "root", "/root/secret"),
            (b"/../admin", "root", "/root/admin"),
            (b"/pre/a/../../../../admin", "root", "/root/admin"),
            (b"/pre/x/..", "pub", "/pub/"),
            (b"/pre/x/../y", "pub", "/pub/y"),
            (b"/pre/./x/%2E/y", "pub", "/pub/x/y"),
            (b"/pre//../x", "pub", "/pub/x"),
            (b"/pre/" + b"../" * 2000 + b"admin", "root", "/root/admin"),
            (b"http://m.test/pre/../secret", "root", "/root/secret"),
            (b"http://m.test:80/pre/%2e%2e/secret?q=/../x", "root",
             "/root/secret?q=/../x"),
        ]
        with harness.Collector() as col:
            for target, which, want in cases:
                with col.case(target[:60].decode()):
                    pub.reset()
                    root.reset()
                    r, _ = _get(c.port, target)
                    expect(r is not None, "no response")
                    expect_eq(r.status, 200, "status")
                    seen = {"pub": _targets(pub), "root": _targets(root)}
                    other = "root" if which == "pub" else "pub"
                    expect_eq(seen[which], [want], "%s origin got" % which)
                    expect_eq(seen[other], [], "%s origin got" % other)


def test_unnormalisable_targets_refused():
    # Finding 8 (encoded slash, backslash, path parameters) and 11
    # (fragment), and bytes a request-target never holds: 400 and a close,
    # nothing reaches the origin.
    with Origin() as o, Cistern(
            remap=["map http://m.test/pre/ http://%s/pub/" % o.authority,
                   "map http://m.test/ http://%s/root/" % o.authority]) as c:
        bad = [b"/pre/..%2fsecret", b"/pre/..%2Fsecret", b"/pre/x%2f..%2f..%2fsecret",
               b"/pre/..%5csecret", b"/pre/%2e%2e%5Csecret", b"/pre\\..\\secret",
               b"/pre/..;/secret", b"/pre/.;x/../secret", b"/pre/..%3bx/secret",
               b"/pre/x#frag", b"/pre/x?q=1#frag", b"/pre/#/../secret",
               b"/pre/a%zz", b"/pre/a%", b"/pre/a%00b",
               b"/pre/\xc3\xa9", b"/pre/\x80", b"/pre/x?\xff",
               b"/pre/a\x01b", b"/pre/a\x7fb", b"/pre/a b",
               b"http://u@m.test/pre/x", b"http://m.test/pre/x#f"]
        with harness.Collector() as col:
            for target in bad:
                with col.case(repr(target)):
                    r, closed = _get(c.port, target)
                    expect(r is not None, "no response")
                    expect_eq(r.status, 400, "status")
                    expect(closed, "connection left open after a 400")
        expect_eq(_targets(o), [], "origin requests")
        # what stays legal: an encoded slash (kept encoded), a ';' in a
        # segment, a bare '%' in the query, characters RFC 3986 excludes
        # but clients send ('|', '{')
        for target, want in [(b"/pre/a%2fb", "/pub/a%2Fb"), (b"/pre/a;v=1", "/pub/a;v=1"),
                             (b"/pre/x?q=100%", "/pub/x?q=100%"),
                             (b"/pre/a|b{c}", "/pub/a|b{c}")]:
            o.reset()
            r, _ = _get(c.port, target)
            expect_eq(r.status if r else None, 200, "status of %r" % target)
            expect_eq(_targets(o), [want], "origin got for %r" % target)


def test_one_cache_key_per_normalised_path():
    # Finding 8: the key was built from the raw path, so "/pre/x/../p" and
    # "/pre/p" were two objects; and a raw spelling the origin reads one way
    # must not fill the key of another resource.
    cc = "?Cache-Control=max-age%3D600"
    with Origin() as o, Cistern(
            remap=["map http://m.test/pre/ http://%s/" % o.authority],
            storage=["cache 64M"]) as c:
        # raw, the origin would take seed A; normalised it is seed B
        r, _ = _get(c.port, ("/pre/seed/A/../B/bytes/300/headers" + cc).encode())
        expect_eq(r.status, 200, "first status")
        expect_eq(_targets(o), ["/seed/B/bytes/300/headers" + cc], "origin got")
        expect_body(r.body, seeded("B", 300), "body of the dotted spelling")
        for spelling in ["/pre/seed/B/bytes/300/headers", "/pre/./seed/B/bytes/300/headers",
                         "/pre/seed/%42/bytes/%33%300/%68eaders",
                         "/pre/seed/x/%2e%2E/B/bytes/300/headers",
                         "http://m.test/pre/seed/B/bytes/300/./headers"]:
            r, _ = _get(c.port, (spelling + cc).encode())
            expect_eq(r.status, 200, "status of %s" % spelling)
            expect(is_hit(r), "%s: not a hit (Cache-Status %r)"
                   % (spelling, r.header("Cache-Status")))
            expect_body(r.body, seeded("B", 300), "body of %s" % spelling)
        expect_eq(len(o.requests()), 1, "origin requests")
        # the resource the raw spelling named is its own object
        r, _ = _get(c.port, ("/pre/seed/A/bytes/300/headers" + cc).encode())
        expect(not is_hit(r), "seed A served from cache")
        expect_body(r.body, seeded("A", 300), "seed A body")


def test_absolute_form_empty_path_with_query():
    # Finding 11: "GET http://m.test?q=1" answered 404; the path is "/".
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/base/" % o.authority]) as c:
        for target, want in [(b"http://m.test?q=1", "/base/?q=1"),
                             (b"http://m.test", "/base/"),
                             (b"http://M.TEST:80?x=/../y", "/base/?x=/../y")]:
            o.reset()
            r, _ = _get(c.port, target)
            expect_eq(r.status if r else None, 200, "status of %r" % target)
            expect_eq(_targets(o), [want], "origin got for %r" % target)


def test_options_asterisk_answered_here():
    # Finding 11: "OPTIONS * HTTP/1.1" answered 404.  Cistern is the server
    # it asks about: 200 with Allow, keep-alive, nothing forwarded.
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority]) as c, \
            Conn(c.port) as k:
        r = k.request(b"OPTIONS * HTTP/1.1\r\nHost: m.test\r\n\r\n", method="OPTIONS")
        expect_eq(r.status, 200, "status")
        allow = r.header("Allow") or ""
        for m in ("GET", "HEAD", "OPTIONS"):
            expect(m in allow, "Allow %r lacks %s" % (allow, m))
        # the connection goes on
        r = k.request(b"GET /x HTTP/1.1\r\nHost: m.test\r\n\r\n")
        expect_eq(r.status, 200, "next request")
        expect_eq(_targets(o), ["/x"], "origin requests")
        # an unmapped host too: it is about the server, not a URL
        r, _ = _get(c.port, b"*", host="nowhere.test", method="OPTIONS")
        expect_eq(r.status if r else None, 200, "OPTIONS * for an unmapped host")
        r, _ = _get(c.port, b"*")
        expect_eq(r.status if r else None, 400, "GET *")


def test_remap_join_makes_no_dot_segment():
    # A from-path without a trailing '/' glues the rest of the request path
    # to the to-path: "/pre.." became "/pub/.." at the origin.
    with Origin() as o, Cistern(
            remap=["map http://m.test/pre http://%s/pub/" % o.authority]) as c:
        for target in [b"/pre..", b"/pre../secret", b"/pre./x", b"/pre%2e%2e/secret"]:
            r, _ = _get(c.port, target)
            expect_eq(r.status if r else None, 404, "status of %r" % target)
        expect_eq(_targets(o), [], "origin requests")
        r, _ = _get(c.port, b"/pre.../x")
        expect_eq(r.status if r else None, 200, "status of /pre.../x")
        expect_eq(_targets(o), ["/pub/.../x"], "origin got")


def test_path_length_edges():
    # The mapped path has 8 KiB (conf_remap_result.path, its NUL included):
    # a path longer than that is 414 (was a 404, "no remap rule matches"),
    # one that fits is forwarded normalised, "/.." chains included.
    with Origin() as o, Cistern(
            records={"proxy.config.http.request_line_max_size": 32768,
                     "proxy.config.http.request_header_max_size": 65536},
            remap=["map http://m.test/ http://%s/" % o.authority]) as c:
        fits = b"/" + b"a" * 8190                  # 8191: the most that fits
        r, _ = _get(c.port, fits)
        expect_eq(r.status if r else None, 200, "8191-byte path")
        expect_eq(len(_targets(o)[0]), 8191, "forwarded length")
        r, _ = _get(c.port, fits + b"a")
        expect_eq(r.status if r else None, 414, "8192-byte path")
        o.reset()
        dots = b"/a" + b"/.." * 2728 + b"/bcde"    # 8191 bytes
        r, _ = _get(c.port, dots)
        expect_eq(r.status if r else None, 200, "dotted 8191-byte path")
        expect_eq(_targets(o), ["/bcde"], "origin got")
        r, _ = _get(c.port, dots + b"/")
        expect_eq(r.status if r else None, 414, "dotted 8192-byte path")
        expect_eq(len(o.requests()), 1, "origin requests")


def test_ipv6_literal_host_normalised():
    # An IPv6 literal authority takes the same path through remap.
    with Origin() as o, Cistern(
            remap=["map http://[::1]/pre/ http://%s/pub/" % o.authority,
                   "map http://[::1]/ http://%s/root/" % o.authority]) as c:
        for target, want in [(b"http://[::1]/pre/%2e%2e/x", "/root/x"),
                             (b"http://[::1]/pre/a/./b", "/pub/a/b")]:
            o.reset()
            r, _ = _get(c.port, target, host="[::1]")
            expect_eq(r.status if r else None, 200, "status of %r" % target)
            expect_eq(_targets(o), [want], "origin got for %r" % target)


if __name__ == "__main__":
    harness.main()
