#!/usr/bin/env python3
"""t/test_review.py: reproductions found by adversarial reviews (a helper
given only the diff and the issue, asked to break it).  Each test failed
against the change it was found in, and passes since its fix.

Found in the issue 16 change (2281e96..2e985ac):

- a from-path without a trailing '/' glues the rest of the request path to
  the to-path's last segment: "/pre..;x" under "map http://m/pre
  http://o/pub/" reaches the origin as "/pub/..;x", and "/pre..%2Fx" as
  "/pub/..%2Fx".  The request-target checker refuses exactly these pieces
  ("..;x", "..%2F") when the client writes them as a segment of its own,
  because an origin that strips path parameters (Tomcat, Jetty) or decodes
  %2F takes them for ".." and climbs out of /pub/; the glue makes them
  anyway (conf/remap.c remap_dots_at looks only for a whole "." or ".."
  segment).
- while the client is still sending its request body, the origin waits on
  us, yet the origin's transaction_no_activity_timeout_out runs on
  up_rev (worker/proxy.c up_send arms it after each piece): a client that
  sends a chunk every 3 s with _in 6 and _out 2 gets a 504 "origin
  timeout" 2 s after its head, although neither peer was silent for the
  timer that applies to it.
"""
import socket
import time

import harness
from harness import Cistern, Origin, expect, expect_eq, parse_responses, raw


def _status(port, target, host="m.test"):
    data, _ = raw(port, b"GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                  % (target, host.encode()), timeout=3)
    rs = parse_responses(data, methods=["GET"], strict=False)
    return rs[0].status if rs else None


def _climbs_out(target):
    """Would an origin that strips ';' parameters from each segment and
    decodes %2F / %5C / %3B see a ".." segment in target?"""
    path = target.split("?", 1)[0]
    for enc, dec in (("%2f", "/"), ("%2F", "/"), ("%5c", "/"), ("%5C", "/"),
                     ("%3b", ";"), ("%3B", ";"), ("%2e", "."), ("%2E", ".")):
        path = path.replace(enc, dec)
    return any(seg.split(";", 1)[0] == ".." for seg in path.split("/"))


def test_remap_glue_never_makes_a_dot_segment_with_parameters():
    with Origin() as o, Cistern(
            remap=["map http://m.test/pre http://%s/pub/" % o.authority]) as c:
        bad = []
        for target in [b"/pre..;x", b"/pre..;/secret", b"/pre..%2Fsecret",
                       b"/pre..%5Csecret", b"/pre.%2e%3Bx/secret"]:
            st = _status(c.port, target)
            sent = [r["target"] for r in o.requests()]
            o.reset()
            if any(_climbs_out(t) for t in sent):
                bad.append("%r (%s) -> origin %r" % (target, st, sent))
        expect(not bad, "the glue made a dot segment the checker refuses: "
               + "; ".join(bad))


def test_slow_upload_is_not_an_origin_timeout():
    with Origin() as o, Cistern(
            remap=["map http://m.test/ http://%s/" % o.authority],
            records={"proxy.config.http.transaction_no_activity_timeout_in": 6,
                     "proxy.config.http.transaction_no_activity_timeout_out": 2}) as c:
        s = socket.create_connection(("127.0.0.1", c.port), timeout=10)
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: m.test\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(3):
                time.sleep(3)       # within _in (6 s): the client is moving
                s.sendall(b"5\r\nhello\r\n")
            s.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        data = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
        except OSError:
            pass
        s.close()
        rs = parse_responses(data, strict=False)
        expect_eq(rs[0].status if rs else None, 200,
                  "status of a request whose body arrived every 3 s")
        c.expect_log(r"no response within transaction_no_activity_timeout_out")


if __name__ == "__main__":
    harness.main()
