#!/usr/bin/env python3
"""Partial content (issue 21 stage 5, RFC 9111 3.3): a 206 from the origin
is stored as the byte range it is (a part, under the object's key plus a
suffix), and later Range requests that part covers are hits.

- a stored part answers the ranges inside it (a-b, a-, -n), byte-exact,
  with its complete length in Content-Range; one outside goes to the origin;
- a request without Range, or with If-Range, never gets a part;
- a 200 answering a Range request is stored as the whole object;
- no-store and multipart 206s are not stored;
- a part is completed (RFC 9111 3.3): only the missing tail or head is
  asked for, with If-Range, and a 206 that combines is served with the
  part's bytes; anything else is never mixed with them.
"""
import base64
import os
import re
import shutil
import socket
import subprocess
import time
import harness
from harness import (Cistern, Origin, expect, expect_body, expect_eq, expect_in, is_hit,
                     pattern)

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
    """A stored part never answers a request without Range alone (the
    origin sends the rest), nor one with If-Range (the origin decides),
    and its ETag stays the origin's."""
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


def slicing(o, blk, store="cache 256M", **records):
    """A Cistern mapping HOST to origin o with slice.blockbytes blk."""
    records["proxy.config.cistern.slice.blockbytes"] = blk
    return Cistern(storage=[store], remap=remap_for(o), records=records)


def test_slices():
    """proxy.config.cistern.slice.blockbytes (ATS slice): Range misses on a
    large object fetch the aligned blocks that hold them (the origin sees
    only aligned ranges, never the whole object), byte-exact across block
    boundaries; the blocks fetched combine, and a range inside them is a
    hit."""
    mib, n = 1 << 20, int(os.environ.get("CISTERN_PARTIAL_MB", "256")) << 20
    blk = 4 * mib
    with Origin() as o, slicing(o, blk) as c:
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
    with Origin() as o, slicing(o, 2 * mib, "cache 64M") as c:
        p = "/ranges/etag/s/slow-body/%d/300/%s" % (4 * mib, CC)
        r = get(c.port, p, "bytes=%d-%d" % (mib, 3 * mib))
        expect_part(r, mib, 3 * mib, 4 * mib, "across the block boundary")
        seen = [harness.header_of(q, "Range") for q in o.requests()]
        expect_eq(seen, ["bytes=0-4194303"], "the origin's ranges")


def stream_get(port, path, rng, stop_after=None, rate=None, rcvbuf=None, timeout=30,
               pause=None):
    """GET path with Range rng on a socket of our own, reading the body as
    it comes: all of it (its Content-Length), or stop_after bytes (then
    close), at rate bytes/s when given, reading nothing for pause[1] s
    once pause[0] bytes came.  (head bytes, body bytes, closed by the
    peer)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nRange: %s\r\n\r\n"
              % (path.encode(), HOST.encode(), rng.encode()))
    head, body, t0, closed, want = b"", bytearray(), time.time(), False, None
    try:
        while want is None or len(body) < want:
            d = s.recv(1 << 20)
            if not d:
                closed = True
                break
            if want is None:
                head += d
                if b"\r\n\r\n" not in head:
                    continue
                head, _, d = head.partition(b"\r\n\r\n")
                m = re.search(rb"(?im)^content-length: *(\d+)", head)
                want = int(m.group(1)) if m else 1 << 62
                if stop_after is not None:
                    want = min(want, stop_after)
            body += d
            if rate:
                time.sleep(max(0, t0 + len(body) / float(rate) - time.time()))
            if pause and len(body) >= pause[0]:
                time.sleep(pause[1])
                pause = None
    except ConnectionResetError:
        closed = True
    s.close()
    return head, bytes(body), closed


def origin_blocks(o, blk, since=0):
    """The origin's Range requests after the first since, each checked to
    be one aligned block: their first bytes."""
    starts = []
    for q in o.requests()[since:]:
        rg = harness.header_of(q, "Range")
        m = re.match(r"bytes=(\d+)-(\d+)$", rg or "")
        expect(m is not None, "origin Range %r: not a closed range" % rg)
        a, b = int(m.group(1)), int(m.group(2))
        expect(a % blk == 0 and b + 1 - a == blk, "origin range %r is not one aligned block" % rg)
        starts.append(a)
    return starts


def test_slice_open_range():
    """An open range (a video player's seek, `bytes=N-`) on a slicing rule:
    a 206 to the end of the object, streamed block by block, byte-exact;
    the origin sees one aligned block per request, each once, never the
    whole.  A closed range over many blocks is streamed the same way."""
    mib, n = 1 << 20, int(os.environ.get("CISTERN_PARTIAL_MB", "256")) << 20
    blk = 4 * mib
    with Origin() as o, slicing(o, blk) as c:
        p = "/ranges/etag/open/bytes/%d/%s" % (n, CC)
        want = pattern(n)
        a = n // 2 + 12345
        head, body, _ = stream_get(c.port, p, "bytes=%d-" % a, timeout=120)
        expect(head.startswith(b"HTTP/1.1 206"), "status: %r" % head[:200])
        expect_in(b"Content-Range: bytes %d-%d/%d" % (a, n - 1, n), head, "Content-Range")
        expect_in(b"Content-Length: %d" % (n - a), head, "Content-Length")
        expect_body(body, want[a:], "open range to the end")
        starts = origin_blocks(o, blk)
        expect_eq(sorted(starts), list(range(a // blk * blk, n, blk)),
                  "each block from a's to the last, once")
        # a closed range over five blocks elsewhere: streamed too
        n0 = len(o.requests())
        a, b = blk + 7, 6 * blk - 8
        head, body, _ = stream_get(c.port, p, "bytes=%d-%d" % (a, b), timeout=60)
        expect_in(b"Content-Range: bytes %d-%d/%d" % (a, b, n), head, "closed: Content-Range")
        expect_body(body, want[a:b + 1], "closed range over five blocks")
        expect_eq(sorted(origin_blocks(o, blk, n0)), list(range(blk, 6 * blk, blk)),
                  "closed: its blocks, one request each")


def test_slice_open_leave_and_reuse():
    """A client that reads three blocks' worth of an open range and leaves:
    the origin is asked for at most two blocks beyond what it read, not
    for the rest of the file.  A second open range starting in the blocks
    stored: they come from the store (no origin request for them), the
    next ones from the origin, byte-exact."""
    mib, n = 1 << 20, 64 << 20
    blk = 4 * mib
    with Origin() as o, slicing(o, blk) as c:
        p = "/ranges/etag/leave/bytes/%d/%s" % (n, CC)
        want = pattern(n)
        a = 5 * blk + 100
        head, body, closed = stream_get(c.port, p, "bytes=%d-" % a, stop_after=3 * blk,
                                        rcvbuf=65536)
        expect(head.startswith(b"HTTP/1.1 206") and not closed, "a 206 being sent: %r" % head[:80])
        expect_body(body[:3 * blk], want[a:a + 3 * blk], "the three blocks read")
        time.sleep(2)
        starts = origin_blocks(o, blk)
        read_last = (a + 3 * blk) // blk * blk
        os.environ.get("CISTERN_TEST_VERBOSE") and print([s // blk for s in starts])
        expect(max(starts) <= read_last + 2 * blk,
               "at most two blocks beyond those read: %r" % [s // blk for s in starts])
        expect_eq(len(starts), len(set(starts)), "no block twice")
        got = sum(blk for _ in starts)
        expect(got <= 6 * blk, "origin bytes %d for %d read" % (got, 3 * blk))
        time.sleep(1)
        expect_eq(len(o.requests()), len(starts), "nothing more asked for after the client left")
        # the blocks stored serve a second open range from within them
        stored_end = max(starts) + blk
        n0 = len(o.requests())
        a2 = 6 * blk + 1
        head, body, _ = stream_get(c.port, p, "bytes=%d-" % a2, timeout=60)
        expect_in(b"Content-Range: bytes %d-%d/%d" % (a2, n - 1, n), head, "reuse: Content-Range")
        expect_body(body, want[a2:], "reuse: to the end")
        again = origin_blocks(o, blk, n0)
        expect_eq(sorted(again), list(range(stored_end, n, blk)),
                  "only the blocks not stored asked for")


def test_slice_block_fails():
    """A block that does not come as the first did (answered 200, or with
    another ETag) mid-stream: the client's body stops short of its
    Content-Length and the connection closes; nothing mixed is stored."""
    n, blk = 4000, 1000
    body = bytes(pattern(n))
    with Origin() as o, slicing(o, blk, "cache 64M") as c:
        whole = {"status": 200, "body": body.decode("latin-1"),
                 "headers": [["ETag", '"one"'], ["Cache-Control", "max-age=3600"]]}
        for path, third in (("/two00", whole),
                            ("/etag", part(body[2000:3000].decode("latin-1"), 2000, 2999, n,
                                           '"two"'))):
            o.script(path, [part(body[0:1000].decode("latin-1"), 0, 999, n, '"one"'),
                            part(body[1000:2000].decode("latin-1"), 1000, 1999, n, '"one"'),
                            third])
            head, got, closed = stream_get(c.port, path, "bytes=500-", timeout=10)
            expect(head.startswith(b"HTTP/1.1 206"), "%s: status %r" % (path, head[:80]))
            expect_in(b"Content-Range: bytes 500-3999/4000", head, path + ": Content-Range")
            expect(closed and len(got) < 3500, "%s: cut short (%d bytes, closed %r)"
                   % (path, len(got), closed))
            expect(got == body[500:500 + len(got)], path + ": what came is right")
            n0 = len(o.requests())
            if third is whole:
                r = get(c.port, path, "bytes=0-1999")
                expect(is_hit(r), path + ": the two blocks stored")
                expect_body(r.body, body[:2000], path + ": the stored part")
            else:
                r = get(c.port, path, "bytes=2000-2999")
                expect(is_hit(r), path + ": the block of the other ETag replaced the part")
                expect_body(r.body, body[2000:3000], path + ": its bytes")
                expect_eq(r.header("ETag"), '"two"', path + ": its ETag")
            expect_eq(len(o.requests()), n0, path + ": hits")


def test_slice_slow_client():
    """A client reading an open range at 1 MiB/s is not cut: its blocks
    are fetched as it reads (the origin's no-activity timeout, 1 s,
    does not end it)."""
    mib = 1 << 20
    n = 6 * mib
    with Origin() as o, slicing(o, mib, "cache 64M", **{
            "proxy.config.http.transaction_no_activity_timeout_out": 1}) as c:
        p = "/ranges/etag/slowc/bytes/%d/%s" % (n, CC)
        a = mib // 2
        head, body, _ = stream_get(c.port, p, "bytes=%d-" % a, rate=mib, rcvbuf=16384,
                                   timeout=20)
        expect_in(b"Content-Range: bytes %d-%d/%d" % (a, n - 1, n), head, "Content-Range")
        expect_body(body, pattern(n)[a:], "the whole tail, slowly")
        expect_eq(sorted(origin_blocks(o, mib)), list(range(0, n, mib)), "each block once")


def origin_ranges(o, since):
    """The Range and If-Range of each origin request after the first since."""
    return [(harness.header_of(q, "Range"), harness.header_of(q, "If-Range"))
            for q in o.requests()[since:]]


def expect_whole(r, n, body, what):
    expect_eq(r.status, 200, what + ": status")
    expect_eq(r.header("Content-Range"), None, what + ": no Content-Range")
    expect_eq(r.header("Content-Length"), str(n), what + ": Content-Length")
    expect_body(r.body, body, what)


def test_complete_tail_and_head():
    """A request without Range after a part with a strong ETag: the origin
    is asked only for the missing tail (or head) with If-Range, and the
    client gets a 200 of the whole, the part's bytes and the origin's in
    order (Cache-Status fwd=partial); the combination is stored whole."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        for tag, rng, want in (("t", "bytes=0-399", ("bytes=400-", '"t"')),
                               ("h", "bytes=600-", ("bytes=0-599", '"h"'))):
            p = "/ranges/etag/%s/bytes/1000/%s" % (tag, CC)
            get(c.port, p, rng)
            n0 = len(o.requests())
            r = get(c.port, p)
            expect_whole(r, 1000, pattern(1000), tag + ": completed")
            expect_in("fwd=partial", r.header("Cache-Status") or "", tag + ": Cache-Status")
            expect_eq(origin_ranges(o, n0), [want], tag + ": what the origin was asked")
            r = get(c.port, p)
            expect(is_hit(r), tag + ": the combined object is a hit")
            expect_whole(r, 1000, pattern(1000), tag + ": hit")
            expect_part(get(c.port, p, "bytes=-10"), 990, 999, 1000, tag + ": suffix")
            expect_eq(len(o.requests()), n0 + 1, tag + ": one origin request")


def test_complete_range_request():
    """A range the part holds one end of: only the rest is asked for; the
    client gets its own 206 (part bytes and origin bytes in order), and the
    combined part answers wider ranges.  A range missing both ends goes
    as the client sent it."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        for tag, part_rng, (a, b), asked, (wa, wb) in (
                ("rt", "bytes=0-399", (300, 699), "bytes=400-699", (0, 699)),
                ("rh", "bytes=500-", (200, 599), "bytes=200-499", (200, 999))):
            p = "/ranges/etag/%s/bytes/1000/%s" % (tag, CC)
            get(c.port, p, part_rng)
            n0 = len(o.requests())
            r = get(c.port, p, "bytes=%d-%d" % (a, b))
            expect_part(r, a, b, 1000, tag + ": completed range")
            expect_eq(origin_ranges(o, n0), [(asked, '"%s"' % tag)], tag + ": asked")
            r = get(c.port, p, "bytes=%d-%d" % (wa, wb))
            expect(is_hit(r), tag + ": the combined part answers %d-%d" % (wa, wb))
            expect_part(r, wa, wb, 1000, tag + ": combined")
            expect_eq(len(o.requests()), n0 + 1, tag + ": one origin request")
        p = "/ranges/etag/both/bytes/1000/" + CC
        get(c.port, p, "bytes=400-599")
        n0 = len(o.requests())
        expect_part(get(c.port, p, "bytes=100-899"), 100, 899, 1000, "both ends missing")
        expect_eq(origin_ranges(o, n0), [("bytes=100-899", None)], "the client's range")


def test_complete_answered_200():
    """The origin answers 200 (it ignores Range, or If-Range failed): that
    is served and stored as the object."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        o.script("/c200", [part("a" * 10, 0, 9, 20, '"x"'),
                           {"status": 200, "body": "b" * 20,
                            "headers": [["ETag", '"y"'], ["Cache-Control", "max-age=3600"]]}])
        get(c.port, "/c200", "bytes=0-9")
        r = get(c.port, "/c200")
        expect_whole(r, 20, b"b" * 20, "the origin's 200")
        expect_eq(origin_ranges(o, 1), [("bytes=10-", '"x"')], "asked for the rest")
        r = get(c.port, "/c200")
        expect(is_hit(r), "the 200 is stored")
        expect_whole(r, 20, b"b" * 20, "hit")


def test_complete_not_combined():
    """A 206 that cannot be combined with the part (another ETag, none,
    another range or complete length, several ranges) is never mixed with
    it: the whole is fetched again without Range, served and stored."""
    mp = ("--SEP\r\nContent-Range: bytes 10-14/20\r\n\r\nBBBBB\r\n"
          "--SEP\r\nContent-Range: bytes 15-19/20\r\n\r\nBBBBB\r\n--SEP--\r\n")
    bad = {"etag": part("B" * 10, 10, 19, 20, '"two"'),
           "no-etag": {"status": 206, "body": "B" * 10,
                       "headers": [["Content-Range", "bytes 10-19/20"]]},
           "range": part("B" * 8, 12, 19, 20, '"one"'),
           "length": part("B" * 10, 10, 19, 30, '"one"'),
           "multipart": {"status": 206, "body": mp,
                         "headers": [["Content-Type", "multipart/byteranges; boundary=SEP"],
                                     ["ETag", '"one"']]}}
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        for name, resp in bad.items():
            p = "/nc-" + name
            o.script(p, [part("a" * 10, 0, 9, 20, '"one"'), resp,
                         {"status": 200, "body": "C" * 20,
                          "headers": [["ETag", '"two"'], ["Cache-Control", "max-age=3600"]]}])
            get(c.port, p, "bytes=0-9")
            n0 = len(o.requests())
            r = get(c.port, p)
            expect_whole(r, 20, b"C" * 20, name + ": the whole, fetched again")
            expect_eq(origin_ranges(o, n0), [("bytes=10-", '"one"'), (None, None)],
                      name + ": the rest, then the whole")
            r = get(c.port, p)
            expect(is_hit(r), name + ": the whole is stored")
            expect_whole(r, 20, b"C" * 20, name + ": hit")


def test_complete_no_validator():
    """A part without a strong validator (the cache-tests case): RFC 9111
    3.3 lets the cache ask for the rest, but RFC 9110 15.3.7.3 lets parts
    combine only under one strong validator, so nothing proves a 206 to
    that request the same representation.  The rest is asked for without
    If-Range (an origin that ignores Range answers the 200 we need); its
    206 is dropped and the whole fetched.  A Range request is sent as is."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        p = "/ranges/bytes/10/" + CC
        get(c.port, p, "bytes=0-4")
        n0 = len(o.requests())
        expect_part(get(c.port, p, "bytes=3-7"), 3, 7, 10, "a range past the part")
        expect_eq(origin_ranges(o, n0), [("bytes=3-7", None)], "the client's range")
        p = "/ranges/bytes/12/" + CC
        get(c.port, p, "bytes=0-4")
        n0 = len(o.requests())
        expect_whole(get(c.port, p), 12, pattern(12), "no Range")
        expect_eq(origin_ranges(o, n0), [("bytes=5-", None), (None, None)],
                  "the rest without If-Range, then the whole")
        expect(is_hit(get(c.port, p)), "the whole is stored")


def test_complete_failures():
    """The origin closing mid-tail cuts the client (its head announced the
    whole length) and stores nothing; a HEAD is not completed; a client
    leaving mid-way leaves the store whole and right."""
    cut = ("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 10-19/20\r\n"
           "ETag: \"one\"\r\nCache-Control: max-age=3600\r\nContent-Length: 10\r\n\r\nBBBB")
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o)) as c:
        o.script("/cut", [part("a" * 10, 0, 9, 20, '"one"'),
                          {"raw_b64": base64.b64encode(cut.encode()).decode()},
                          part("B" * 10, 10, 19, 20, '"one"')])
        get(c.port, "/cut", "bytes=0-9")
        data, closed = harness.raw(c.port, b"GET /cut HTTP/1.1\r\nHost: %s\r\n\r\n"
                                   % HOST.encode(), timeout=10)
        head, _, body = data.partition(b"\r\n\r\n")
        expect(head.startswith(b"HTTP/1.1 200") and b"Content-Length: 20" in head,
               "the head of the whole: %r" % head[:200])
        expect(closed and len(body) < 20, "cut short: %d body bytes, closed %r"
               % (len(body), closed))
        expect(body == (b"a" * 10 + b"BBBB")[:len(body)], "what came is right: %r" % body)
        n0 = len(o.requests())
        r = get(c.port, "/cut")
        expect_whole(r, 20, b"a" * 10 + b"B" * 10, "completed at the next request")
        expect_eq(len(o.requests()), n0 + 1, "nothing was stored from the cut one")
        # HEAD: answered by the origin, no Range
        p = "/ranges/etag/hd/bytes/100/" + CC
        get(c.port, p, "bytes=0-49")
        n0 = len(o.requests())
        r = harness.one_request(c.port, "HEAD", p, None, (), HOST, None, 10)
        expect(r is not None and r.status == 200, "HEAD answered")
        expect_eq(origin_ranges(o, n0), [(None, None)], "HEAD: not completed")
        # a client that leaves while the origin sends the tail
        mib = 1 << 20
        p = "/ranges/etag/lv/slow-body/%d/200/%s" % (8 * mib, CC)
        get(c.port, p, "bytes=0-%d" % (mib - 1))
        cn = harness.Conn(c.port, timeout=10)
        cn.send(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (p.encode(), HOST.encode()))
        cn._recv_some(5)
        cn.close()
        r = get(c.port, p, "bytes=%d-%d" % (mib - 5, mib + 4))
        expect_part(r, mib - 5, mib + 4, 8 * mib, "after the client left")
        r = get(c.port, p)
        expect_whole(r, 8 * mib, pattern(8 * mib), "the whole after the client left")


def test_complete_slow_client():
    """While a slow client takes the part's 6 MiB (3 s), the origin's tail
    (100 bytes, read at once into a buffer it does not fill) is not timed:
    its no-activity timeout (1 s) does not cut the answer."""
    mib = 1 << 20
    with Origin() as o, Cistern(storage=["cache 256M"], remap=remap_for(o), records={
            "proxy.config.http.transaction_no_activity_timeout_out": 1}) as c:
        n = 6 * mib + 100
        p = "/ranges/etag/sl/bytes/%d/%s" % (n, CC)
        get(c.port, p, "bytes=0-%d" % (6 * mib - 1))
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        s.settimeout(10)
        s.connect(("127.0.0.1", c.port))
        s.sendall(b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                  % (p.encode(), HOST.encode()))
        data, t0 = b"", time.time()
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
            time.sleep(max(0, t0 + len(data) / (2.0 * mib) - time.time()))  # 2 MiB/s
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        expect(head.startswith(b"HTTP/1.1 200") and b"fwd=partial" in head,
               "a completed part: %r" % head[:400])
        expect_body(body, pattern(n), "the whole, slowly")


def test_complete_h2():
    """Over HTTP/2 (h2c): the part's bytes and the origin's in order, for a
    missing tail and a missing head."""
    if not shutil.which("curl"):
        raise harness.SkipTest("curl not installed")
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o), records={
            "proxy.config.http.server_ports": "0 0:proto=http;http2"}) as c:
        for tag, rng in (("2t", "bytes=0-299999"), ("2h", "bytes=300000-")):
            p = "/ranges/etag/%s/bytes/1000000/%s" % (tag, CC)
            get(c.port, p, rng)
            out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "-H", "Host: " + HOST,
                                  "-D", "/dev/stderr", "http://127.0.0.1:%d%s" % (c.ports[1], p)],
                                 capture_output=True, timeout=30)
            head = out.stderr.decode("latin-1")
            expect(head.startswith("HTTP/2 200") and "fwd=partial" in head, tag + ": %r" % head)
            expect_body(out.stdout, pattern(1000000), tag + ": completed over h2")
            # the combination is committed when the origin's last byte is
            # in, which may come after curl has the client's last one
            # (under ASan and load it did): wait for it without fetching
            harness.wait_for(lambda: get(c.port, p, headers=[
                ("Cache-Control", "only-if-cached")]).status == 200, 10,
                what=tag + ": the combination stored")
            r = get(c.port, p)
            expect(is_hit(r), tag + ": stored whole")
            expect_whole(r, 1000000, pattern(1000000), tag)


# The http-cache-tests suite's partial-* cases (npm package
# http-cache-tests; .ci/run installs it and sets CISTERN_CACHE_TESTS to its
# folder).  Four of them answer "bytes=-5" with Content-Range "bytes 4-9/10"
# (6 bytes) and a 5-byte body: an inconsistent 206 that Cistern does not
# store (RFC 9110 14.4: no recombining an invalid Content-Range;
# detail=part-length), so they report "not from cache"; test_part_* above
# are their consistent versions.  partial-store-partial-complete stores a
# part without a validator and expects a request without Range to ask for
# the rest (bytes=5-): see test_complete_no_validator for why no 206 to
# it is ever combined.
CT_PASS = ["partial-store-complete-reuse-partial", "partial-store-partial-complete",
           "partial-store-complete-reuse-partial-no-last",
           "partial-store-complete-reuse-partial-suffix",
           "partial-use-headers", "partial-use-stored-headers"]
CT_INCONSISTENT = ["partial-store-partial-reuse-partial",
                   "partial-store-partial-reuse-partial-byterange",
                   "partial-store-partial-reuse-partial-absent",
                   "partial-store-partial-reuse-partial-suffix"]


@harness.timeout(180)
def test_cache_tests_partial():
    with harness.CacheTests() as ct:
        cport = harness.free_port()
        with Cistern(storage=["cache 64M"], records={"proxy.config.http.server_ports": str(cport)},
                     remap=["map http://127.0.0.1:%d/ http://127.0.0.1:%d/" % (cport, ct.port)]):
            with harness.Collector() as col:
                for tid in CT_PASS + CT_INCONSISTENT:
                    out = ct.run(cport, tid)
                    last = out.strip().splitlines()[-1] if out.strip() else "(no output)"
                    with col.case(tid):
                        if tid in CT_PASS:
                            expect(last.startswith(("\u2705", "Y ")), "%s: %s" % (tid, last))
                        else:
                            expect("does not come from cache" in last
                                   and "detail=part-length" in out, "%s: %s" % (tid, last))


if __name__ == "__main__":
    harness.main()
