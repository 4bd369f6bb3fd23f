#!/usr/bin/env python3
"""Partial content (issue 21 stage 5, RFC 9111 3.3): a 206 from the origin
is stored as the byte range it is (a part, under the object's key plus a
suffix), and later Range requests that part covers are hits.

- a stored part answers the ranges inside it (a-b, a-, -n), byte-exact,
  with its complete length in Content-Range; one outside goes to the origin;
- a request without Range, or with If-Range, never gets a part;
- a 200 answering a Range request is stored as the whole object;
- no-store and multipart 206s are not stored.
"""
import os
import socket
import subprocess
import harness
from harness import Cistern, Origin, expect, expect_body, expect_eq, is_hit, pattern

HOST = "p.test"
CC = "headers?Cache-Control=max-age%3D3600"


def remap_for(o):
    return ["map http://%s/ http://%s/" % (HOST, o.authority)]


def get(port, path, rng=None, headers=()):
    h = list(headers) + ([("Range", rng)] if rng else [])
    r = harness.one_request(port, "GET", path, None, h, HOST, None, 30,
                            close_delimited_ok=False)
    expect(r is not None, "GET %s %s: no complete response" % (path, rng))
    return r


def expect_part(r, a, b, n, what):
    expect_eq(r.status, 206, what + ": status")
    expect_eq(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, n),
              what + ": Content-Range")
    expect_eq(r.header("Content-Length"), str(b - a + 1), what + ": Content-Length")
    expect_body(r.body, pattern(n)[a:b + 1], what)


def test_part_stored_and_reused():
    """bytes=100-599 of 1000 from the origin, then ranges inside it as
    hits; one outside it goes to the origin (and is stored in its place)."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        p = "/ranges/etag/v1/bytes/1000/" + CC
        r = get(c.port, p, "bytes=100-599")
        expect_part(r, 100, 599, 1000, "miss")
        expect(not is_hit(r), "the first is a miss")
        expect_eq(harness.header_of(o.requests()[-1], "Range"), "bytes=100-599",
                  "the range went to the origin")
        for rng, a, b in (("bytes=100-599", 100, 599), ("bytes=200-299", 200, 299),
                          ("bytes=599-599", 599, 599), ("bytes=450-", None, None)):
            n0 = len(o.requests())
            r = get(c.port, p, rng)
            if a is None:   # 450- is 450-999: not covered
                expect_part(r, 450, 999, 1000, rng)
                expect_eq(len(o.requests()), n0 + 1, rng + " goes to the origin")
                continue
            expect_part(r, a, b, 1000, rng)
            expect(is_hit(r), "%s: a hit (Cache-Status %r)" % (rng, r.header("Cache-Status")))
            expect_eq(len(o.requests()), n0, rng + ": no origin request")
        # the last fetch (450-999) replaced the part: its ranges are hits now
        n0 = len(o.requests())
        r = get(c.port, p, "bytes=-100")
        expect_part(r, 900, 999, 1000, "suffix")
        expect(is_hit(r), "suffix of the new part: a hit")
        expect_eq(len(o.requests()), n0, "no origin request")


def test_part_never_answers_whole():
    """A stored part never answers a request without Range, nor one with
    If-Range (the origin decides), and its ETag stays the origin's."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        p = "/ranges/etag/v1/bytes/500/" + CC
        expect_part(get(c.port, p, "bytes=0-99"), 0, 99, 500, "miss")
        n0 = len(o.requests())
        r = get(c.port, p)
        expect_eq(r.status, 200, "no Range: status")
        expect_body(r.body, pattern(500), "no Range: the whole body")
        expect_eq(len(o.requests()), n0 + 1, "no Range: from the origin")
        r = get(c.port, p, "bytes=0-9", [("If-Range", '"v1"')])
        expect_eq(len(o.requests()), n0 + 1, "If-Range: the whole object is stored now")
        expect_part(r, 0, 9, 500, "If-Range from the whole object")
        expect_eq(r.header("ETag"), '"v1"', "ETag")


def test_range_answered_200_is_whole():
    """An origin that ignores Range answers 200: stored as the object."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        p = "/bytes/800/" + CC
        r = get(c.port, p, "bytes=10-19")
        expect_eq(r.status, 200, "the origin's 200 is passed on")
        n0 = len(o.requests())
        r = get(c.port, p, "bytes=10-19")
        expect_part(r, 10, 19, 800, "from the stored whole object")
        expect(is_hit(r), "a hit")
        r = get(c.port, p)
        expect_body(r.body, pattern(800), "the whole object")
        expect_eq(len(o.requests()), n0, "no origin request")


def test_part_not_stored():
    """no-store, and a 206 without a complete length, are not stored."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        for p in ("/ranges/bytes/300/headers?Cache-Control=no-store",
                  "/status/206/bytes/10/headers?Cache-Control=max-age%3D60"
                  "&Content-Range=bytes%200-9/*"):
            get(c.port, p, "bytes=0-9")
            n0 = len(o.requests())
            r = get(c.port, p, "bytes=0-9")
            expect(not is_hit(r), p + ": not a hit")
            expect_eq(len(o.requests()), n0 + 1, p + ": from the origin again")


def test_parts_combined():
    """Parts with the same strong ETag that overlap or adjoin are combined
    (RFC 9111 3.4): the bytes of the stored one before and after the new
    one are kept; combined up to the whole, it is a 200 under the object's
    key (a request without Range is a hit)."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        p = "/ranges/etag/v1/bytes/1000/" + CC
        for rng, a, b in (("bytes=300-599", 300, 599),     # stored
                          ("bytes=100-399", 100, 399),     # 100-599: new + old tail
                          ("bytes=600-699", 600, 699)):    # 100-699: old + new (adjoining)
            expect_part(get(c.port, p, rng), a, b, 1000, rng + " (miss)")
        n0 = len(o.requests())
        for a, b in ((100, 699), (100, 100), (699, 699), (250, 650)):
            r = get(c.port, p, "bytes=%d-%d" % (a, b))
            expect_part(r, a, b, 1000, "combined %d-%d" % (a, b))
            expect(is_hit(r), "combined %d-%d: a hit" % (a, b))
        expect_eq(len(o.requests()), n0, "the combined ranges: no origin request")
        r = get(c.port, p)
        expect(not is_hit(r), "no Range before the part is whole: from the origin")
        # the whole object is stored now; start again with a new URL
        p = "/ranges/etag/v2/bytes/1000/" + CC
        get(c.port, p, "bytes=0-499")
        get(c.port, p, "bytes=500-")
        n0 = len(o.requests())
        r = get(c.port, p)
        expect_eq(r.status, 200, "whole: status")
        expect_body(r.body, pattern(1000), "whole")
        expect(is_hit(r), "combined to the whole: a hit without Range")
        expect_eq(r.header("Content-Range"), None, "whole: no Content-Range")
        expect_part(get(c.port, p, "bytes=-10"), 990, 999, 1000, "whole: suffix")
        expect_eq(len(o.requests()), n0, "no origin request")


def part(body, a, b, n, etag):
    return {"status": 206, "reason": "Partial Content", "body": body,
            "headers": [["Content-Range", "bytes %d-%d/%d" % (a, b, n)],
                        ["ETag", etag], ["Cache-Control", "max-age=3600"]]}


def test_validator_change_drops_part():
    """A part with another ETag is not combined: it replaces the stored
    one, whose bytes are never served again; a weak ETag never combines."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        o.script("/v", [part("a" * 10, 0, 9, 20, '"one"'), part("B" * 10, 10, 19, 20, '"two"'),
                        part("C" * 10, 0, 9, 20, '"two"')])
        expect_eq(get(c.port, "/v", "bytes=0-9").body, b"a" * 10, "first part")
        expect_eq(get(c.port, "/v", "bytes=10-19").body, b"B" * 10, "second part")
        r = get(c.port, "/v", "bytes=0-9")
        expect(not is_hit(r), "the old part is gone")
        expect_eq(r.body, b"C" * 10, "0-9 from the origin again")
        r = get(c.port, "/v", "bytes=0-19")     # C's part and B's: one ETag now
        expect(is_hit(r), "0-19 combined under \"two\"")
        expect_eq(r.body, b"C" * 10 + b"B" * 10, "combined body")
        o.script("/w", [part("x" * 10, 0, 9, 20, 'W/"w"'), part("y" * 10, 10, 19, 20, 'W/"w"')])
        get(c.port, "/w", "bytes=0-9")
        get(c.port, "/w", "bytes=10-19")
        r = get(c.port, "/w", "bytes=0-19")
        expect(not is_hit(r), "weak ETags: not combined")


def test_slices():
    """proxy.config.cistern.slice.blockbytes (ATS slice): Range misses on a
    large object fetch the aligned blocks that hold them (the origin sees
    only aligned ranges, never the whole object), byte-exact across block
    boundaries; the blocks fetched combine, and a range inside them is a
    hit."""
    mib, n = 1 << 20, int(os.environ.get("CISTERN_PARTIAL_MB", "256")) << 20
    blk = 4 * mib
    with Origin() as o, Cistern(storage=["cache 256M"], remap=remap_for(o),
                                records={"proxy.config.cistern.slice.blockbytes": blk}) as c:
        p = "/ranges/etag/big/bytes/%d/%s" % (n, CC)
        want = pattern(n)
        cases = [(blk - 100, blk + 100), (2 * blk - 1, 2 * blk), (0, 0),
                 (3 * blk + 5, 3 * blk + 5), (n - blk - 7, n - 1), (n // 2, n // 2 + blk + 1)]
        for a, b in cases:
            r = get(c.port, p, "bytes=%d-%d" % (a, b))
            expect_eq(r.status, 206, "%d-%d: status" % (a, b))
            expect_eq(r.header("Content-Range"), "bytes %d-%d/%d" % (a, b, n),
                      "%d-%d: Content-Range" % (a, b))
            expect_body(r.body, want[a:b + 1], "%d-%d" % (a, b))
        seen = [harness.header_of(q, "Range") for q in o.requests()]
        os.environ.get("CISTERN_TEST_VERBOSE") and print(seen)
        expect(len(seen) <= len(cases), "one origin request per miss at most: %r" % seen)
        for rg in seen:
            expect(rg is not None and rg.startswith("bytes="), "origin Range %r" % rg)
            a, b = (int(x) for x in rg[6:].split("-"))
            expect(a % blk == 0 and (b + 1) % blk == 0, "origin range %r not aligned" % rg)
        n0 = len(o.requests())
        r = get(c.port, p, "bytes=%d-%d" % (n // 2 + 10, n // 2 + 2 * blk - 10))
        expect(is_hit(r), "inside the last blocks fetched: a hit")
        expect_body(r.body, want[n // 2 + 10:n // 2 + 2 * blk - 9], "hit across a block boundary")
        expect_eq(len(o.requests()), n0, "no origin request")


def test_slice_slow_origin():
    """A slice over 1 MiB from a slow origin (3 s): the client waits for
    the whole slice (it is not released to the origin with its own range
    when the head comes, as a joiner of a large miss is)."""
    mib = 1 << 20
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records={"proxy.config.cistern.slice.blockbytes": 2 * mib}) as c:
        p = "/ranges/etag/s/slow-body/%d/300/%s" % (4 * mib, CC)
        r = get(c.port, p, "bytes=%d-%d" % (mib, 3 * mib))
        expect_part(r, mib, 3 * mib, 4 * mib, "across the block boundary")
        seen = [harness.header_of(q, "Range") for q in o.requests()]
        expect_eq(seen, ["bytes=0-4194303"], "the origin's ranges")


# The http-cache-tests suite's partial-* cases (npm package
# http-cache-tests; .ci/run installs it and sets CISTERN_CACHE_TESTS to its
# folder).  Four of them answer "bytes=-5" with Content-Range "bytes 4-9/10"
# (6 bytes) and a 5-byte body: an inconsistent 206 that Cistern does not
# store (RFC 9110 14.4: no recombining an invalid Content-Range;
# detail=part-length), so they report "not from cache"; test_part_* above
# are their consistent versions.  partial-store-partial-complete (a part
# completed by a Range request for the rest) is not built yet.
CT_PASS = ["partial-store-complete-reuse-partial",
           "partial-store-complete-reuse-partial-no-last",
           "partial-store-complete-reuse-partial-suffix",
           "partial-use-headers", "partial-use-stored-headers"]
CT_INCONSISTENT = ["partial-store-partial-reuse-partial",
                   "partial-store-partial-reuse-partial-byterange",
                   "partial-store-partial-reuse-partial-absent",
                   "partial-store-partial-reuse-partial-suffix"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


@harness.timeout(180)
def test_cache_tests_partial():
    ct = os.environ.get("CISTERN_CACHE_TESTS", "")
    if not ct or not os.path.isfile(os.path.join(ct, "cli.mjs")):
        raise harness.SkipTest("CISTERN_CACHE_TESTS (http-cache-tests' folder) not set")
    sport, cport = free_port(), free_port()
    env = dict(os.environ, npm_config_port=str(sport), npm_config_protocol="http",
               npm_config_pidfile=os.devnull)
    srv = subprocess.Popen(["node", "server/server.mjs"], cwd=ct, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        harness.wait_for(lambda: can_connect(sport), 10, what="the cache-tests server")
        with Cistern(storage=["cache 64M"], records={"proxy.config.http.server_ports": str(cport)},
                     remap=["map http://127.0.0.1:%d/ http://127.0.0.1:%d/" % (cport, sport)]):
            with harness.Collector() as col:
                run_ct(ct, cport, col)
    finally:
        srv.terminate()
        srv.wait(10)


def can_connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def run_ct(ct, cport, col):
    for tid in CT_PASS + CT_INCONSISTENT:
        e = dict(os.environ, npm_config_base="http://127.0.0.1:%d" % cport, npm_config_id=tid)
        out = subprocess.run(["node", "--no-warnings", "cli.mjs"], cwd=ct, env=e,
                             capture_output=True, text=True, timeout=60).stdout
        last = out.strip().splitlines()[-1] if out.strip() else "(no output)"
        with col.case(tid):
            if tid in CT_PASS:
                expect(last.startswith(("\u2705", "Y ")), "%s: %s" % (tid, last))
            else:
                expect("does not come from cache" in last and "detail=part-length" in out,
                       "%s: %s" % (tid, last))


if __name__ == "__main__":
    harness.main()
