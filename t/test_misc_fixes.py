#!/usr/bin/env python3
"""Regression tests for the smaller findings of issue 16 ("Trustworthy in
the field"), one test per finding, each failing before its fix:

- a refused PUSH answered with its own reason, not another connection's.
"""

import harness
from harness import (Cistern, Conn, Origin, cache_stats, expect, expect_eq,
                     wait_for)

PUSH_ON = {"proxy.config.http.push_method_enabled": 1}
BYTES_IN = "proxy.process.cistern.client_bytes_in"


# ---------------------------------------------------------------------------
# PUSH refusals: each connection's own reason

def _pushed_head(cc, length):
    return ("HTTP/1.1 200 OK\r\nCache-Control: %s\r\nContent-Length: %d\r\n"
            "\r\n" % (cc, length)).encode("latin-1")


def _push_head(path, body_len):
    return ("PUSH %s HTTP/1.1\r\nHost: p.test\r\nContent-Length: %d\r\n\r\n"
            % (path, body_len)).encode("latin-1")


def _read_waiter(port, nbytes):
    """A function for wait_for: true once the worker has read nbytes more
    request bytes than when _read_waiter was called (client_bytes_in; each
    /_stats request adds its own head, a constant measured first)."""
    v0 = cache_stats(port)[BYTES_IN]
    per_poll = cache_stats(port)[BYTES_IN] - v0
    polls = [1]

    def done():
        polls[0] += 1
        v = cache_stats(port)[BYTES_IN]
        return v - v0 - polls[0] * per_poll >= nbytes
    return done


def test_push_refusals_keep_their_own_reason():
    """Two PUSHes refused for different reasons, the first one's body still
    streaming when the second is refused: each gets its own reason.  The
    reason used to be built in one static buffer, so the first connection
    was answered with the second one's reason."""
    with Origin() as o, Cistern(
            storage=["cache 64M"], workers=1, records=PUSH_ON,
            remap=["map http://p.test/ http://%s/" % o.authority]) as c:
        for first_cc, second_cc in (("no-store", "private"),
                                    ("private", "no-store")):
            body = b"x" * 4000
            pushed_a = _pushed_head(first_cc, len(body)) + body
            a = Conn(c.port)
            try:
                # A: the pushed head (refused at once) and half the body
                sent = _push_head("/a-" + first_cc, len(pushed_a)) \
                    + pushed_a[:len(pushed_a) // 2]
                a_read = _read_waiter(c.port, len(sent))
                a.send(sent)
                wait_for(a_read, 10, what="the worker to read PUSH A's head")
                # B: refused for another reason, answered at once
                pushed_b = _pushed_head(second_cc, 10) + b"0123456789"
                b = Conn(c.port)
                try:
                    rb = b.request(_push_head("/b-" + second_cc, len(pushed_b))
                                   + pushed_b, method="PUSH")
                finally:
                    b.close()
                expect_eq(rb.status, 400, "PUSH B status")
                expect(("not storable: %s" % second_cc).encode() in rb.body,
                       "PUSH B (%s): body %r" % (second_cc, rb.body))
                # A ends: its answer must still name its own reason
                a.send(pushed_a[len(pushed_a) // 2:])
                ra = a.response(method="PUSH")
            finally:
                a.close()
            expect_eq(ra.status, 400, "PUSH A status")
            expect(("not storable: %s" % first_cc).encode() in ra.body,
                   "PUSH A (%s) got another connection's reason: %r"
                   % (first_cc, ra.body))


if __name__ == "__main__":
    harness.main()
