#!/usr/bin/env python3
"""End-to-end tests of the HTTP caching rules (issue 7; CACHING.md).

One test per rule of RFC 9111 (and the parts of RFC 9110, 5861, 9211 and
9213 that a cache implements).  Each test's name or first docstring line
quotes the section it checks, and each asserts both what the client got
(status, key fields, body, Age, Cache-Status) and what reached the origin
(how many requests, and for validation which validators), from the
origin's request log (t/origin.py).

Timing: freshness is counted in whole seconds, so a test that needs an
object to go stale first waits for the start of a second (align()), stores
an object with max-age=1 there, and sleeps to the next second (at()).  A
hit inside the first second is then certain and staleness a second later
too, without long sleeps.
"""

import re
import time
import urllib.parse
from email.utils import formatdate

import harness
from harness import Cistern, Collector, Origin, expect, expect_eq, pattern

HOST = "r.test"
STORE = ["cache 64M"]


def remap_for(*origins, hosts=(HOST,)):
    return ["map http://%s/ http://%s/" % (h, o.authority)
            for h, o in zip(hosts, origins)]


def daemon(o, records=None, **kw):
    """A one-worker daemon with a cache, mapping HOST to origin o."""
    return Cistern(storage=STORE, remap=kw.pop("remap", None) or remap_for(o),
                   records=records, workers=1, **kw)


def hp(prefix, *pairs):
    """prefix + the origin's headers directive for the (name, value) pairs:
    hp("/a", ("Cache-Control", "max-age=60")) ->
    "/a/headers?Cache-Control=max-age%3D60"."""
    return prefix + "/headers?" + urllib.parse.urlencode(pairs)


def fetch(port, path, method="GET", headers=(), body=None, host=HOST,
          timeout=20.0):
    """One request on a new connection; the parsed Response (fails the
    test when no complete response came back)."""
    r = harness.one_request(port, method, path, body, headers, host,
                            timeout=timeout)
    expect(r is not None, "%s %s: no complete response" % (method, path))
    return r


def cs(r):
    return r.header("Cache-Status", "")


def expect_hit(r, what="response"):
    expect(re.search(r"^cistern; hit\b", cs(r)) is not None,
           "%s: want a hit, got status %d Cache-Status %r"
           % (what, r.status, cs(r)))
    expect(r.header("Age") is not None, "%s: a hit without Age" % what)


def expect_not_hit(r, what="response"):
    expect(re.search(r"^cistern; hit\b", cs(r)) is None,
           "%s: served from the cache (Cache-Status %r), want a fetch"
           % (what, cs(r)))


def expect_cs(r, rx, what="response"):
    expect(re.search(rx, cs(r)) is not None,
           "%s: Cache-Status %r does not match %r" % (what, cs(r), rx))


def ttl(r):
    m = re.search(r"ttl=(-?\d+)", cs(r))
    expect(m is not None, "no ttl in Cache-Status %r" % cs(r))
    return int(m.group(1))


def reqs(o, path):
    """The origin's recorded requests for path (its path part)."""
    p = urllib.parse.urlsplit(path).path
    return [q for q in o.requests() if q["path"] == p]


def expect_origin(o, path, n, what="origin requests"):
    rs = reqs(o, path)
    expect_eq(len(rs), n, "%s for %s (%s)" % (
        what, path, [(q["method"], q["target"]) for q in rs]))
    return rs


def qh(q, name):
    """A header of a recorded origin request, or None."""
    for k, v in q["headers"]:
        if k.lower() == name.lower():
            return v
    return None


def align():
    """Sleep to just after the start of a wall-clock second; return it."""
    now = time.time()
    s = int(now) + 1
    time.sleep(s - now + 0.02)
    return s


def at(t):
    """Sleep until just after wall-clock time t (an integer second)."""
    d = t + 0.05 - time.time()
    if d > 0:
        time.sleep(d)


def script(o, path, *responses):
    """Script exact responses for path; "headers" given as a dict or list;
    "body" str."""
    out = []
    for r in responses:
        r = dict(r)
        h = r.get("headers", [])
        r["headers"] = [list(x) for x in (h.items() if isinstance(h, dict)
                                          else h)]
        out.append(r)
    o.script(urllib.parse.urlsplit(path).path, out)


def ok(body, **headers):
    """A scripted 200 with headers given as keyword arguments
    (Cache_Control -> Cache-Control)."""
    return {"status": 200, "body": body,
            "headers": [(k.replace("_", "-"), v) for k, v in headers.items()]}


# ---------------------------------------------------------------------------
# RFC 9111 4.2.1: calculating the freshness lifetime

def test_4_2_1_smaxage_over_maxage_over_expires():
    """RFC 9111 4.2.1: s-maxage wins over max-age, max-age over Expires,
    Expires - Date counts when nothing else is there."""
    past = formatdate(time.time() - 3600, usegmt=True)
    future = formatdate(time.time() + 45, usegmt=True)
    cases = [
        ("/f-smax", [("Cache-Control", "max-age=0, s-maxage=60")], 60),
        ("/f-max", [("Cache-Control", "max-age=30"), ("Expires", past)], 30),
        ("/f-exp", [("Expires", future)], 45),
    ]
    with Origin() as o, daemon(o) as c, Collector() as col:
        for prefix, hdrs, want in cases:
            with col.case(prefix):
                path = hp(prefix + "/bytes/50", *hdrs)
                r1 = fetch(c.port, path)
                expect_eq(r1.status, 200, "first status")
                expect_cs(r1, r"fwd=uri-miss; fwd-status=200; stored", "first")
                r2 = fetch(c.port, path)
                expect_hit(r2, "second")
                expect_eq(r2.body, pattern(50), "hit body")
                expect(want - 3 <= ttl(r2) <= want,
                       "ttl %d, want about %d" % (ttl(r2), want))
                expect_origin(o, path, 1)


def test_4_2_1_invalid_expires_is_stale():
    """RFC 9111 4.2.1 / 5.3: an invalid Expires (here "0", with a
    Last-Modified that would give heuristic freshness) means already
    stale: the next request is revalidated with If-Modified-Since."""
    lm = int(time.time()) - 100000
    path = hp("/exp0/last-modified/%d/bytes/40" % lm, ("Expires", "0"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_eq(r1.status, 200, "first status")
        r2 = fetch(c.port, path)
        expect_eq(r2.status, 200, "second status")
        expect_eq(r2.body, pattern(40), "second body")
        expect_not_hit(r2, "second")
        expect_cs(r2, r"fwd=stale; fwd-status=304", "second")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-Modified-Since"), formatdate(lm, usegmt=True),
                  "If-Modified-Since of the revalidation")


def test_4_2_1_max_age_0_is_stale():
    """RFC 9111 4.2.1: max-age=0 is stale at once: every use revalidates
    (with the stored ETag)."""
    path = hp("/ma0/etag/z0/bytes/30", ("Cache-Control", "max-age=0"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_eq(r1.status, 200, "first status")
        for i in (2, 3):
            r = fetch(c.port, path)
            expect_eq(r.status, 200, "request %d status" % i)
            expect_eq(r.body, pattern(30), "request %d body" % i)
            expect_cs(r, r"fwd=stale; fwd-status=304", "request %d" % i)
        qs = expect_origin(o, path, 3)
        expect_eq([qh(q, "If-None-Match") for q in qs],
                  [None, '"z0"', '"z0"'], "If-None-Match sent")


def test_4_2_1_malformed_max_age_is_stale():
    """RFC 9111 4.2.1: a malformed max-age makes the response stale (it does
    not fall back to the Expires next to it)."""
    future = formatdate(time.time() + 3600, usegmt=True)
    with Origin() as o, daemon(o) as c, Collector() as col:
        for name, v in (("letters", "max-age=1a"), ("empty", "max-age="),
                        ("negative", "max-age=-5"),
                        ("conflicting", "max-age=60, max-age=30")):
            with col.case(name):
                path = hp("/mal-%s/bytes/20" % name, ("Cache-Control", v),
                          ("Expires", future))
                fetch(c.port, path)
                r2 = fetch(c.port, path)
                expect_eq(r2.status, 200, "second status")
                expect_not_hit(r2, "second")
                expect_origin(o, path, 2)


# ---------------------------------------------------------------------------
# RFC 9111 4.2.2: heuristic freshness

def _heuristic(required, path_lm, want_stored, want_ttl=None):
    recs = {"proxy.config.http.cache.required_headers": required}
    with Origin() as o, daemon(o, recs) as c:
        path = path_lm
        r1 = fetch(c.port, path)
        expect_eq(r1.status, 200, "first status")
        r2 = fetch(c.port, path)
        if want_stored:
            expect_cs(r1, r"stored", "first")
            expect_hit(r2, "second")
            expect_eq(r2.body, r1.body, "hit body")
            expect(want_ttl - 3 <= ttl(r2) <= want_ttl,
                   "ttl %d, want about %d" % (ttl(r2), want_ttl))
            expect_origin(o, path, 1)
        else:
            expect_cs(r1, r"detail=no-freshness", "first")
            expect_not_hit(r2, "second")
            expect_origin(o, path, 2)


def test_4_2_2_heuristic_last_modified_required_headers_1():
    """RFC 9111 4.2.2: with required_headers 1 (default) a Last-Modified
    alone gives 10% of its age: stored and served."""
    lm = int(time.time()) - 100000
    _heuristic(1, "/h1/last-modified/%d/bytes/10" % lm, True, 10000)


def test_4_2_2_heuristic_not_with_required_headers_2():
    """RFC 9111 4.2.2: required_headers 2 (ATS's default) wants explicit
    freshness: a Last-Modified alone is not stored."""
    lm = int(time.time()) - 100000
    _heuristic(2, "/h2/last-modified/%d/bytes/10" % lm, False)


def test_4_2_2_heuristic_required_headers_0_without_lm():
    """RFC 9111 4.2.2: required_headers 0 stores a 200 with neither
    freshness nor Last-Modified, for heuristic_min_lifetime."""
    _heuristic(0, "/h0/bytes/10", True, 3600)


# ---------------------------------------------------------------------------
# RFC 9111 4.2.3: calculating age

def test_4_2_3_origin_age_counted():
    """RFC 9111 4.2.3: the origin's Age counts: max-age=100 with Age: 99 is
    fresh for about one second, and the hit's Age continues from 99."""
    path = hp("/age99/bytes/10", ("Cache-Control", "max-age=100"),
              ("Age", "99"))
    with Origin() as o, daemon(o) as c:
        s = align()
        r1 = fetch(c.port, path)
        expect_eq(r1.status, 200, "first status")
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path)
        expect_hit(r2, "second (same second)")
        expect(int(r2.header("Age")) >= 99, "hit Age %r, want >= 99"
               % r2.header("Age"))
        expect(ttl(r2) <= 1, "ttl %d, want <= 1" % ttl(r2))
        expect_origin(o, path, 1)
        at(s + 1)
        r3 = fetch(c.port, path)
        expect_not_hit(r3, "a second later")
        expect_eq(r3.status, 200, "third status")
        expect_origin(o, path, 2)


def test_4_2_3_age_on_every_hit_increases():
    """RFC 9111 4.2.3 / 5.1: every response from the cache has Age, and it
    grows with time."""
    path = hp("/agegrow/bytes/10", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        s = align()
        fetch(c.port, path)
        r2 = fetch(c.port, path)
        expect_hit(r2, "second")
        a2 = int(r2.header("Age"))
        expect(0 <= a2 <= 1, "Age right after storing: %d" % a2)
        at(s + 2)
        r3 = fetch(c.port, path)
        expect_hit(r3, "third")
        a3 = int(r3.header("Age"))
        expect(a3 >= a2 + 2, "Age two seconds later: %d (was %d)" % (a3, a2))
        expect_origin(o, path, 1)


# ---------------------------------------------------------------------------
# RFC 9111 3: storing responses

def _never_stored(c, o, path, detail, headers=()):
    r1 = fetch(c.port, path, headers=headers)
    expect_eq(r1.status, 200, "first status")
    expect_cs(r1, r"fwd=uri-miss; fwd-status=200; detail=%s" % detail,
              "first")
    r2 = fetch(c.port, path, headers=headers)
    expect_not_hit(r2, "second")
    expect(r2.header("X-Origin-Seq") != r1.header("X-Origin-Seq"),
           "the same X-Origin-Seq twice")
    expect_origin(o, path, 2)


def test_3_no_store_not_stored():
    """RFC 9111 5.2.2.5 (3): a response with no-store is not stored."""
    with Origin() as o, daemon(o) as c:
        _never_stored(c, o, hp("/ns/bytes/10", (
            "Cache-Control", "no-store, max-age=60")), "no-store")


def test_3_private_not_stored():
    """RFC 9111 5.2.2.7 (3): a shared cache does not store private."""
    with Origin() as o, daemon(o) as c:
        _never_stored(c, o, hp("/pv/bytes/10", (
            "Cache-Control", "private, max-age=60")), "private")


def test_3_no_cache_stored_and_always_revalidated():
    """RFC 9111 5.2.2.4: no-cache is stored but validated before every use:
    the origin sees a conditional request each time."""
    path = hp("/nc/etag/nc1/bytes/25", ("Cache-Control", "no-cache"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_cs(r1, r"stored", "first")
        for i in (2, 3, 4):
            r = fetch(c.port, path)
            expect_eq(r.status, 200, "request %d status" % i)
            expect_eq(r.body, pattern(25), "request %d body" % i)
            expect_cs(r, r"fwd=stale; fwd-status=304", "request %d" % i)
        qs = expect_origin(o, path, 4)
        expect_eq([qh(q, "If-None-Match") for q in qs],
                  [None, '"nc1"', '"nc1"', '"nc1"'], "If-None-Match sent")


def test_3_must_revalidate_not_served_stale():
    """RFC 9111 5.2.2.2: must-revalidate: a stale object is revalidated even
    when the client accepts stale answers (max-stale)."""
    path = hp("/mr/etag/mr1/bytes/25",
              ("Cache-Control", "max-age=1, must-revalidate"))
    with Origin() as o, daemon(o) as c:
        s = align()
        fetch(c.port, path)
        at(s + 1)
        r = fetch(c.port, path, headers=[("Cache-Control", "max-stale=600")])
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, pattern(25), "body")
        expect_cs(r, r"fwd=stale; fwd-status=304", "stale with max-stale")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"mr1"', "If-None-Match")


def test_3_5_authorization():
    """RFC 9111 3.5: a response to a request with Authorization is stored
    only when it says public, s-maxage or must-revalidate."""
    auth = [("Authorization", "Basic dTpw")]
    with Origin() as o, daemon(o) as c, Collector() as col:
        with col.case("max-age only"):
            _never_stored(c, o, hp("/au0/bytes/10",
                                   ("Cache-Control", "max-age=60")),
                          "authorization", headers=auth)
        for name, v in (("public", "public, max-age=60"),
                        ("s-maxage", "s-maxage=60"),
                        ("must-revalidate", "max-age=60, must-revalidate")):
            with col.case(name):
                path = hp("/au-%s/bytes/10" % name, ("Cache-Control", v))
                r1 = fetch(c.port, path, headers=auth)
                expect_cs(r1, r"stored", "first")
                r2 = fetch(c.port, path, headers=auth)
                expect_hit(r2, "second")
                expect_origin(o, path, 1)
                expect_eq(qh(reqs(o, path)[0], "Authorization"),
                          "Basic dTpw", "Authorization forwarded")


def test_3_1_connection_named_fields_not_stored():
    """RFC 9111 3.1: fields named by Connection are not stored (nor
    forwarded)."""
    path = hp("/connx/bytes/10", ("Cache-Control", "max-age=60"),
              ("Connection", "X-Secret"), ("X-Secret", "1"),
              ("X-Public", "2"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_eq(r1.header("X-Secret"), None, "X-Secret forwarded")
        r2 = fetch(c.port, path)
        expect_hit(r2, "second")
        expect_eq(r2.header("X-Secret"), None, "X-Secret in the hit")
        expect_eq(r2.header("X-Public"), "2", "X-Public in the hit")
        expect_origin(o, path, 1)


def test_3_qualified_no_cache_and_private_fields_not_stored():
    """RFC 9111 5.2.2.4 / 5.2.2.7: no-cache="X-A" and private="X-P": the
    response is stored without those fields."""
    path = hp("/qnc/bytes/10",
              ("Cache-Control", 'max-age=60, no-cache="X-A", private="X-P"'),
              ("X-A", "a"), ("X-P", "p"), ("X-B", "b"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_eq(r1.header("X-A"), "a", "X-A in the first (forwarded)")
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path)
        expect_hit(r2, "second")
        expect_eq(r2.header("X-A"), None, "X-A in the hit")
        expect_eq(r2.header("X-P"), None, "X-P in the hit")
        expect_eq(r2.header("X-B"), "b", "X-B in the hit")
        expect_eq(r2.body, pattern(10), "hit body")
        expect_origin(o, path, 1)


def _revalidated(c, o, path, first, then, method="GET"):
    """Script first (a max-age=1 200) and then (the origin's next answer)
    for path, store first, and return the answer to method once it is
    stale (the request that goes to the origin and gets then)."""
    script(o, path, first, then)
    s = align()
    fetch(c.port, path)
    at(s + 1)
    return fetch(c.port, path, method=method)


def test_3_2_refresh_keeps_out_private_and_no_cache_fields():
    """RFC 9111 5.2.2.7 / 5.2.2.4 with 3.2: the fields a 304 (or a HEAD's
    200) names in private="..." or no-cache="..." are not stored by the
    refresh either: the client that revalidated gets them, a later hit
    does not; the other fields of the 304 are stored."""
    for how in ("304", "HEAD"):
        path = "/qref-" + how
        cc = 'max-age=60, private="X-User", no-cache="X-Nc"'
        again = [("Cache-Control", cc), ("ETag", '"p1"'), ("X-User", "alice"),
                 ("X-Nc", "n"), ("X-Ok", "2")]
        with Origin() as o, daemon(o) as c:
            r = _revalidated(c, o, path,
                             ok("hello", Cache_Control="max-age=1", ETag='"p1"', X_Ok="1"),
                             {"status": 304, "headers": again} if how == "304"
                             else {"status": 200, "body": "hello", "headers": again},
                             "GET" if how == "304" else "HEAD")
            expect_cs(r, r"fwd=stale; fwd-status=%s$" % ("304" if how == "304" else "200"),
                      how + ": refreshed")
            expect_eq((r.header("X-User"), r.header("X-Nc")), ("alice", "n"),
                      how + ": the revalidating client's fields")
            h = fetch(c.port, path)
            expect_hit(h, how + ": after the refresh")
            expect_eq((h.header("X-User"), h.header("X-Nc"), h.header("X-Ok")),
                      (None, None, "2"), how + ": fields of the hit")
            expect_origin(o, path, 2)


def test_3_2_private_304_does_not_refresh_the_stored_response():
    """RFC 9111 5.2.2.7: a 304 that says private (unqualified) is for one
    user: its fields answer the client that revalidated, but a shared
    cache does not store them, nor the freshness it gives: the stored
    response stays stale, and the next request revalidates again."""
    path = "/priv304"
    with Origin() as o, daemon(o) as c:
        r = _revalidated(c, o, path, ok("hello", Cache_Control="max-age=1", ETag='"q1"'),
                         {"status": 304, "headers": [("Cache-Control", "max-age=60, private"),
                                                     ("ETag", '"q1"'), ("X-User", "alice")]})
        expect_eq((r.body, r.header("X-User")), (b"hello", "alice"), "revalidated answer")
        r = fetch(c.port, path)
        expect_not_hit(r, "after a private 304")
        expect_eq(r.header("X-User"), "alice", "its own 304's field")
        expect_origin(o, path, 3)


def test_3_2_set_cookie_of_a_304_reaches_its_client_only():
    """RFC 9111 4.3.4: the answer to a revalidation is the stored response
    updated with the 304's fields, Set-Cookie included: the client that
    revalidated gets its cookie.  Set-Cookie is never stored (README's
    cistern.cache.set_cookie): with 1 the refresh is stored without it
    (the next GET a hit without a cookie); with 0 (the default) a response
    with Set-Cookie is not stored, so neither is the refresh (the next GET
    revalidates again)."""
    for mode in (1, 0):
        path = "/ck304-%d" % mode
        with Origin() as o, daemon(o, {"proxy.config.cistern.cache.set_cookie": mode}) as c:
            r = _revalidated(c, o, path, ok("hello", Cache_Control="max-age=1", ETag='"c1"'),
                             {"status": 304, "headers": [("Cache-Control", "max-age=60"),
                                                         ("ETag", '"c1"'), ("Set-Cookie", "s=2")]})
            expect_cs(r, r"fwd=stale; fwd-status=304$", "%d: revalidated" % mode)
            expect_eq(r.header("Set-Cookie"), "s=2", "%d: the 304's cookie" % mode)
            r = fetch(c.port, path)
            expect_eq(r.header("Set-Cookie"), "s=2" if mode == 0 else None,
                      "%d: cookie on the next answer" % mode)
            (expect_hit if mode else expect_not_hit)(r, "%d: the next GET" % mode)
            expect_origin(o, path, 2 if mode else 3)


# ---------------------------------------------------------------------------
# RFC 9111 5.2.1: request directives

def test_5_2_1_1_request_max_age_0_revalidates():
    """RFC 9111 5.2.1.1: a client's max-age=0 forces revalidation of a
    fresh object older than 0 s; max-age=30 accepts it."""
    path = hp("/rma/etag/rma/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        s = align()
        fetch(c.port, path)
        at(s + 1)       # Age 1: older than max-age=0 allows
        r = fetch(c.port, path, headers=[("Cache-Control", "max-age=0")])
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, pattern(20), "body")
        expect_not_hit(r, "max-age=0")
        expect_cs(r, r"fwd=\w+; fwd-status=304", "max-age=0")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"rma"', "If-None-Match")
        r = fetch(c.port, path, headers=[("Cache-Control", "max-age=30")])
        expect_hit(r, "max-age=30")
        expect_origin(o, path, 2)


def test_5_2_1_2_max_stale_serves_stale():
    """RFC 9111 5.2.1.2: max-stale (with and without a value) lets a stale
    object be served without asking the origin."""
    path = hp("/mst/bytes/20", ("Cache-Control", "max-age=1"))
    with Origin() as o, daemon(o) as c:
        s = align()
        fetch(c.port, path)
        at(s + 1)
        for v in ("max-stale=60", "max-stale"):
            r = fetch(c.port, path, headers=[("Cache-Control", v)])
            expect_hit(r, v)
            expect_eq(r.body, pattern(20), "%s body" % v)
            expect(ttl(r) <= 0, "%s: ttl %d, want <= 0" % (v, ttl(r)))
        expect_origin(o, path, 1)
        r = fetch(c.port, path)
        expect_not_hit(r, "without max-stale")
        expect_origin(o, path, 2)


def test_5_2_1_3_min_fresh():
    """RFC 9111 5.2.1.3: min-fresh: an object fresh for less than asked is
    revalidated; one fresh for long enough is a hit."""
    path = hp("/mf/etag/mf/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[("Cache-Control", "min-fresh=10")])
        expect_hit(r, "min-fresh=10")
        expect_origin(o, path, 1)
        r = fetch(c.port, path, headers=[("Cache-Control", "min-fresh=3600")])
        expect_not_hit(r, "min-fresh=3600")
        expect_eq(r.body, pattern(20), "body")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"mf"', "If-None-Match")


def test_5_2_1_4_request_no_cache_revalidates():
    """RFC 9111 5.2.1.4: a client's no-cache makes the cache validate a
    fresh object (Cache-Status fwd=request)."""
    path = hp("/rnc/etag/rnc/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[("Cache-Control", "no-cache")])
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, pattern(20), "body")
        expect_cs(r, r"fwd=request", "no-cache")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"rnc"', "If-None-Match")


def test_5_2_1_5_request_no_store():
    """RFC 9111 5.2.1.5: the response to a request with no-store is not
    stored (a stored one may still answer it)."""
    path = hp("/rns/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path, headers=[("Cache-Control", "no-store")])
        expect_eq(r1.status, 200, "no-store status")
        expect_cs(r1, r"detail=request-no-store", "no-store")
        r2 = fetch(c.port, path)
        expect_not_hit(r2, "plain GET after it")
        expect_cs(r2, r"stored", "plain GET after it")
        expect_origin(o, path, 2)
        r3 = fetch(c.port, path, headers=[("Cache-Control", "no-store")])
        expect_hit(r3, "no-store on a stored object")
        expect_origin(o, path, 2)


def test_5_2_1_7_only_if_cached():
    """RFC 9111 5.2.1.7: only-if-cached: 504 without asking the origin when
    nothing is stored; the stored object when there is one."""
    path = hp("/oic/bytes/20", ("Cache-Control", "max-age=60"))
    oic = [("Cache-Control", "only-if-cached")]
    with Origin() as o, daemon(o) as c:
        r = fetch(c.port, path, headers=oic)
        expect_eq(r.status, 504, "miss status")
        expect(cs(r) != "", "504 without Cache-Status")
        expect_origin(o, path, 0)
        fetch(c.port, path)
        r = fetch(c.port, path, headers=oic)
        expect_eq(r.status, 200, "stored status")
        expect_hit(r, "stored")
        expect_eq(r.body, pattern(20), "body")
        expect_origin(o, path, 1)


def test_5_4_pragma_no_cache():
    """RFC 9111 5.4: Pragma: no-cache acts as no-cache when there is no
    Cache-Control, and is ignored when there is one."""
    path = hp("/prg/etag/prg/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[("Pragma", "no-cache"),
                                         ("Cache-Control", "max-stale=5")])
        expect_hit(r, "Pragma with Cache-Control")
        expect_origin(o, path, 1)
        r = fetch(c.port, path, headers=[("Pragma", "no-cache")])
        expect_not_hit(r, "Pragma alone")
        expect_eq(r.body, pattern(20), "body")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"prg"', "If-None-Match")


# ---------------------------------------------------------------------------
# RFC 9110 13: conditional requests

def test_9110_13_1_2_if_none_match_on_fresh_object():
    """RFC 9110 13.1.2: If-None-Match (strong or weak, weak comparison) on a
    fresh stored object: 304 with the ETag, from the cache."""
    path = hp("/inm/etag/v1/bytes/20", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c, Collector() as col:
        fetch(c.port, path)
        for inm in ('"v1"', 'W/"v1"', '"x", "v1"', "*"):
            with col.case("If-None-Match: %s" % inm):
                r = fetch(c.port, path, headers=[("If-None-Match", inm)])
                expect_eq(r.status, 304, "status")
                expect_eq(r.header("ETag"), '"v1"', "ETag")
                expect_eq(r.body, b"", "body")
                expect_hit(r)
        with col.case("not matching"):
            r = fetch(c.port, path, headers=[("If-None-Match", '"v2"')])
            expect_eq(r.status, 200, "status")
            expect_eq(r.body, pattern(20), "body")
            expect_hit(r)
        expect_origin(o, path, 1)


def test_9110_13_1_3_if_modified_since_on_fresh_object():
    """RFC 9110 13.1.3: If-Modified-Since at or after Last-Modified: 304
    from the cache; before it: 200."""
    lm = int(time.time()) - 5000
    path = hp("/ims/last-modified/%d/bytes/20" % lm,
              ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[("If-Modified-Since",
                                          formatdate(lm, usegmt=True))])
        expect_eq(r.status, 304, "IMS = Last-Modified")
        expect_eq(r.header("Last-Modified"), formatdate(lm, usegmt=True),
                  "Last-Modified of the 304")
        expect_hit(r, "304")
        r = fetch(c.port, path, headers=[("If-Modified-Since",
                                          formatdate(lm - 100, usegmt=True))])
        expect_eq(r.status, 200, "IMS before Last-Modified")
        expect_eq(r.body, pattern(20), "body")
        expect_origin(o, path, 1)


def test_9110_13_2_2_if_none_match_wins_over_ims():
    """RFC 9110 13.2.2: If-None-Match is evaluated and If-Modified-Since
    ignored when both are present."""
    lm = int(time.time()) - 5000
    path = hp("/inmims/etag/w1/last-modified/%d/bytes/20" % lm,
              ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[
            ("If-None-Match", '"other"'),
            ("If-Modified-Since", formatdate(lm, usegmt=True))])
        expect_eq(r.status, 200, "INM fails, IMS would match")
        expect_eq(r.body, pattern(20), "body")
        r = fetch(c.port, path, headers=[
            ("If-None-Match", '"w1"'),
            ("If-Modified-Since", formatdate(lm - 100, usegmt=True))])
        expect_eq(r.status, 304, "INM matches, IMS would not")
        expect_origin(o, path, 1)


def test_9111_4_3_1_stale_revalidated_with_stored_validators():
    """RFC 9111 4.3.1: a stale object is revalidated with its ETag
    (If-None-Match) and Last-Modified (If-Modified-Since); the origin's 304
    lets the stored body be served."""
    lm = int(time.time()) - 5000
    path = hp("/val/etag/val/last-modified/%d/bytes/30" % lm,
              ("Cache-Control", "max-age=1"))
    with Origin() as o, daemon(o) as c:
        s = align()
        fetch(c.port, path)
        at(s + 1)
        r = fetch(c.port, path, headers=[("If-None-Match", '"client"')])
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, pattern(30), "body")
        expect_cs(r, r"fwd=stale; fwd-status=304", "revalidated")
        expect(r.header("Age") is not None, "no Age on a revalidated answer")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"val"', "If-None-Match")
        expect_eq(qh(qs[1], "If-Modified-Since"), formatdate(lm, usegmt=True),
                  "If-Modified-Since")


def test_9111_4_3_4_304_refreshes_headers():
    """RFC 9111 4.3.4: the origin's 304 updates the stored fields (a field
    it carries shows on later hits) and the freshness, while the body and
    Content-Length stay; the body is not fetched again."""
    path = "/refresh"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("hello world", Cache_Control="max-age=1", ETag='"r1"',
                  X_Version="1"),
               {"status": 304, "headers": [
                   ("Cache-Control", "max-age=60"), ("ETag", '"r1"'),
                   ("X-Version", "2"), ("Content-Length", "11")]})
        s = align()
        r1 = fetch(c.port, path)
        expect_eq(r1.header("X-Version"), "1", "first X-Version")
        at(s + 1)
        r2 = fetch(c.port, path)
        expect_eq(r2.status, 200, "revalidated status")
        expect_cs(r2, r"fwd=stale; fwd-status=304", "revalidated")
        expect_eq(r2.body, b"hello world", "revalidated body")
        expect_eq(r2.header("X-Version"), "2", "revalidated X-Version")
        r3 = fetch(c.port, path)
        expect_hit(r3, "after the 304")
        expect(ttl(r3) >= 55, "ttl after the 304: %d" % ttl(r3))
        expect_eq(r3.header("X-Version"), "2", "hit X-Version")
        expect_eq(r3.header_all("X-Version"), ["2"], "X-Version fields")
        expect_eq(r3.header("Content-Length"), "11", "hit Content-Length")
        expect_eq(r3.body, b"hello world", "hit body")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"r1"', "If-None-Match")


def test_9111_4_3_3_200_on_revalidation_replaces():
    """RFC 9111 4.3.3: a full 200 to a revalidation replaces the stored
    object."""
    path = "/replace"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("old body", Cache_Control="max-age=1", ETag='"a"'),
               ok("the new body", Cache_Control="max-age=60", ETag='"b"'))
        s = align()
        fetch(c.port, path)
        at(s + 1)
        r2 = fetch(c.port, path)
        expect_eq(r2.status, 200, "status")
        expect_eq(r2.body, b"the new body", "revalidation body")
        expect_cs(r2, r"fwd=stale; fwd-status=200; stored", "revalidation")
        r3 = fetch(c.port, path)
        expect_hit(r3, "after")
        expect_eq(r3.body, b"the new body", "hit body")
        expect_eq(r3.header("ETag"), '"b"', "hit ETag")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"a"', "If-None-Match")


def test_9111_4_3_5_head_200_refreshes_stored_get():
    """RFC 9111 4.3.5: a 200 to a HEAD forwarded for a stale stored GET
    response, with the same ETag and Content-Length, updates it (3.2): the
    HEAD is answered from the updated object (its stored fields kept, the
    HEAD's added), and the new freshness makes the next GET a hit with the
    stored body."""
    path = "/headref"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("hello world", Cache_Control="max-age=1", ETag='"h1"', X_Kept="1"),
               {"status": 200, "body": "hello world", "headers": [
                   ("Cache-Control", "max-age=60"), ("ETag", '"h1"'), ("X-New", "2")]})
        s = align()
        fetch(c.port, path)
        at(s + 1)
        h = fetch(c.port, path, method="HEAD")
        expect_eq(h.status, 200, "HEAD status")
        expect_cs(h, r"fwd=stale; fwd-status=200$", "HEAD refreshed the object")
        expect_eq((h.header("X-Kept"), h.header("X-New")), ("1", "2"), "HEAD fields")
        expect_eq(h.header("Content-Length"), "11", "HEAD Content-Length")
        r = fetch(c.port, path)
        expect_hit(r, "GET after the HEAD")
        expect(ttl(r) >= 55, "ttl after the HEAD: %d" % ttl(r))
        expect_eq((r.body, r.header("X-New")), (b"hello world", "2"), "GET after the HEAD")
        qs = expect_origin(o, path, 2)
        expect_eq([q["method"] for q in qs], ["GET", "HEAD"], "origin methods")


def test_9111_4_3_5_head_200_other_validator_invalidates():
    """RFC 9111 4.3.5: a 200 to a HEAD whose ETag (or Content-Length) is
    not the stored response's means the origin has another one: the HEAD
    answer is the origin's, and the stored response is no longer used (the
    next GET is a plain fetch, not a revalidation of the old ETag)."""
    for name, head in (("etag", [("ETag", '"h2"')]),
                       ("length", [("ETag", '"h1"'), ("Content-Length", "99")])):
        path = "/headinv-" + name
        with Origin() as o, daemon(o) as c:
            script(o, path,
                   ok("hello world", Cache_Control="max-age=1", ETag='"h1"'),
                   {"status": 200, "headers": [("Cache-Control", "max-age=60"), ("X-Head", "y")]
                    + head},
                   ok("new body", Cache_Control="max-age=60", ETag='"h2"'))
            s = align()
            fetch(c.port, path)
            at(s + 1)
            h = fetch(c.port, path, method="HEAD")
            expect_eq((h.status, h.header("X-Head")), (200, "y"), name + ": HEAD answer")
            r = fetch(c.port, path)
            expect_eq(r.body, b"new body", name + ": GET after the HEAD")
            qs = expect_origin(o, path, 3)
            expect_eq(qh(qs[2], "If-None-Match"), None,
                      name + ": the old object revalidated after the HEAD")


# ---------------------------------------------------------------------------
# RFC 9111 4.1: Vary

def _two_languages(c, o, path):
    script(o, path,
           ok("english", Cache_Control="max-age=60", Vary="Accept-Language"),
           ok("french", Cache_Control="max-age=60", Vary="Accept-Language"))
    en = fetch(c.port, path, headers=[("Accept-Language", "en")])
    fr = fetch(c.port, path, headers=[("Accept-Language", "fr")])
    expect_eq((en.body, fr.body), (b"english", b"french"), "first bodies")
    return en, fr


def test_4_1_two_variants_stored():
    """RFC 9111 4.1: two variants of one URL (Accept-Language en / fr) are
    stored at once, each served with its own body."""
    path = "/vary2"
    with Origin() as o, daemon(o) as c:
        _two_languages(c, o, path)
        for _ in range(2):
            for lang, body in (("en", b"english"), ("fr", b"french")):
                r = fetch(c.port, path, headers=[("Accept-Language", lang)])
                expect_hit(r, lang)
                expect_eq(r.body, body, "%s body" % lang)
        qs = expect_origin(o, path, 2)
        expect_eq([qh(q, "Accept-Language") for q in qs], ["en", "fr"],
                  "Accept-Language at the origin")


def test_4_1_vary_miss_cache_status():
    """RFC 9211 2.2 / RFC 9111 4.1: an unseen variant of a stored URL is
    fwd=vary-miss."""
    path = "/varymiss"
    with Origin() as o, daemon(o) as c:
        en, fr = _two_languages(c, o, path)
        expect_cs(en, r"fwd=uri-miss", "first variant")
        expect_cs(fr, r"fwd=vary-miss; fwd-status=200; stored",
                  "second variant")
        expect_origin(o, path, 2)



def test_4_1_variant_of_a_full_head_not_stored_as_another():
    """RFC 9111 4.1: a variant is stored only under the field values its
    request carried.  A request with as many fields as a head may hold
    (128) is forwarded with more (Via, X-Forwarded-For), so its fields
    cannot be read back for the variant's key: it is not stored, rather
    than stored as the variant of requests without Accept-Language."""
    path = "/vfull"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("deutsch", Cache_Control="max-age=60", Vary="Accept-Language"),
               ok("neutral", Cache_Control="max-age=60", Vary="Accept-Language"))
        many = [("Accept-Language", "de")] + [("X-Jn", "x")] * 125
        r1 = fetch(c.port, path, headers=many)
        expect_eq((r1.status, r1.body), (200, b"deutsch"), "first answer")
        expect_cs(r1, r"detail=vary-key", "not stored")
        r2 = fetch(c.port, path)
        expect_eq(r2.body, b"neutral", "request without Accept-Language")
        expect_not_hit(r2, "request without Accept-Language")
        expect_origin(o, path, 2)

def test_4_1_vary_star_never_served_from_cache():
    """RFC 9111 4.1: Vary: * never matches: never served from the cache."""
    path = hp("/vstar/bytes/10", ("Cache-Control", "max-age=60"),
              ("Vary", "*"))
    with Origin() as o, daemon(o) as c:
        for i in range(3):
            r = fetch(c.port, path)
            expect_eq(r.status, 200, "status %d" % i)
            expect_not_hit(r, "request %d" % i)
        expect_origin(o, path, 3)


def test_4_1_accept_encoding_normalised():
    """RFC 9111 4.1 (normalize_ae 1): "gzip, deflate" and "gzip" select the
    same variant, and the origin receives the normalised Accept-Encoding."""
    path = hp("/vae/bytes/10", ("Cache-Control", "max-age=60"),
              ("Vary", "Accept-Encoding"))
    recs = {"proxy.config.http.normalize_ae": 1}
    with Origin() as o, daemon(o, recs) as c:
        r1 = fetch(c.port, path, headers=[("Accept-Encoding",
                                           "gzip, deflate, br")])
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path, headers=[("Accept-Encoding", "gzip")])
        expect_hit(r2, "gzip")
        r3 = fetch(c.port, path, headers=[("Accept-Encoding", "deflate")])
        expect_cs(r3, r"fwd=vary-miss", "deflate (normalised to nothing)")
        r4 = fetch(c.port, path)
        expect_hit(r4, "no Accept-Encoding (same as deflate)")
        qs = expect_origin(o, path, 2)
        expect_eq([qh(q, "Accept-Encoding") for q in qs], ["gzip", None],
                  "Accept-Encoding at the origin")


def test_4_1_accept_encoding_lines_are_one_list():
    """RFC 9110 5.3 (normalize_ae 1): two Accept-Encoding lines are one
    list, for the cache key and for the origin alike.  "gzip;q=0" then "*"
    refuses gzip: the origin must not be asked for it, and the second
    request is a hit (the stored variant and the lookup agree)."""
    path = hp("/vae2/bytes/10", ("Cache-Control", "max-age=60"),
              ("Vary", "Accept-Encoding"))
    recs = {"proxy.config.http.normalize_ae": 1}
    two = [("Accept-Encoding", "gzip;q=0"), ("Accept-Encoding", "*")]
    with Origin() as o, daemon(o, recs) as c:
        r1 = fetch(c.port, path, headers=two)
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path, headers=two)
        expect_hit(r2, "the same two lines")
        qs = expect_origin(o, path, 1)
        expect_eq([qh(q, "Accept-Encoding") for q in qs], [None],
                  "Accept-Encoding at the origin")


def test_4_1_blanks_next_to_commas_select_one_variant():
    """RFC 9111 4.1: selecting fields match across "adding or removing
    whitespace, where allowed in the header field's syntax": `1,2`,
    `1, 2` and `1 ,2` (a list's OWS) select one stored response; `1,,2`
    and a quoted `"1, 2"` are other values."""
    path = hp("/vws/bytes/10", ("Cache-Control", "max-age=60"), ("Vary", "Foo"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path, headers=[("Foo", "1,2")])
        expect_cs(r1, r"stored", "first")
        for v in ("1, 2", "1 ,2", "1 ,\t 2"):
            expect_hit(fetch(c.port, path, headers=[("Foo", v)]), "Foo: %r" % v)
        expect_hit(fetch(c.port, path, headers=[("Foo", "1"), ("Foo", "2")]),
                   "Foo on two lines")
        for v in ("1,,2", '"1, 2"', "12"):
            expect_not_hit(fetch(c.port, path, headers=[("Foo", v)]), "Foo: %r" % v)
        expect_origin(o, path, 4)


def test_4_1_accept_language_case_normalised():
    """RFC 9111 4.1 allows "case-normalization, where values are defined
    to be case-insensitive", as language ranges are (RFC 4647 2.1):
    `Accept-Language: EN-us, De` selects the response to `en-US, de`; the
    same values in another field do not."""
    path = hp("/vlang/bytes/10", ("Cache-Control", "max-age=60"),
              ("Vary", "Accept-Language, X-L"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path, headers=[("Accept-Language", "en-US, de"), ("X-L", "a")])
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path, headers=[("Accept-Language", "EN-us,De"), ("X-L", "a")])
        expect_hit(r2, "Accept-Language in other case")
        r3 = fetch(c.port, path, headers=[("Accept-Language", "en-US, de"), ("X-L", "A")])
        expect_not_hit(r3, "X-L in other case")
        expect_origin(o, path, 2)


def test_4_1_purge_removes_all_variants():
    """RFC 9111 4.1 / PURGE: purging the URL removes every variant."""
    path = "/vpurge"
    with Origin() as o, daemon(o) as c:
        _two_languages(c, o, path)
        r = fetch(c.port, path, method="PURGE")
        expect_eq(r.status, 200, "PURGE status")
        vary = dict(Cache_Control="max-age=60", Vary="Accept-Language")
        script(o, path, ok("english2", **vary), ok("french2", **vary))
        en = fetch(c.port, path, headers=[("Accept-Language", "en")])
        fr = fetch(c.port, path, headers=[("Accept-Language", "fr")])
        expect_not_hit(en, "en after PURGE")
        expect_not_hit(fr, "fr after PURGE")
        expect_eq((en.body, fr.body), (b"english2", b"french2"), "bodies")
        expect_origin(o, path, 4)


# ---------------------------------------------------------------------------
# RFC 9110 14: ranges

def test_9110_14_ranges_from_a_stored_object():
    """RFC 9110 14.2: single ranges from a stored object: 206 with
    Content-Range and the exact bytes; 416 with bytes */N; several ranges:
    200 with the whole object."""
    path = hp("/rg/bytes/1000", ("Cache-Control", "max-age=60"))
    full = pattern(1000)
    cases = [("bytes=10-19", 10, 19), ("bytes=-100", 900, 999),
             ("bytes=990-", 990, 999), ("bytes=995-5000", 995, 999),
             ("bytes=-5000", 0, 999)]
    with Origin() as o, daemon(o) as c, Collector() as col:
        fetch(c.port, path)
        for rng, a, b in cases:
            with col.case(rng):
                r = fetch(c.port, path, headers=[("Range", rng)])
                expect_eq(r.status, 206, "status")
                expect_eq(r.header("Content-Range"), "bytes %d-%d/1000"
                          % (a, b), "Content-Range")
                expect_eq(r.header("Content-Length"), str(b - a + 1),
                          "Content-Length")
                expect_eq(r.body, full[a:b + 1], "bytes")
                expect_hit(r)
        with col.case("unsatisfiable"):
            r = fetch(c.port, path, headers=[("Range", "bytes=2000-2100")])
            expect_eq(r.status, 416, "status")
            expect_eq(r.header("Content-Range"), "bytes */1000",
                      "Content-Range")
            expect(cs(r) != "", "416 without Cache-Status")
        with col.case("several ranges"):
            r = fetch(c.port, path, headers=[("Range", "bytes=0-1,5-6")])
            expect_eq(r.status, 200, "status")
            expect_eq(r.body, full, "body")
            expect_hit(r)
        expect_origin(o, path, 1)


def test_9110_13_1_5_if_range():
    """RFC 9110 13.1.5: If-Range with the stored (strong) ETag: 206; with
    another ETag: the whole object."""
    path = hp("/ifr/etag/ir/bytes/100", ("Cache-Control", "max-age=60"))
    with Origin() as o, daemon(o) as c:
        fetch(c.port, path)
        r = fetch(c.port, path, headers=[("Range", "bytes=0-9"),
                                         ("If-Range", '"ir"')])
        expect_eq(r.status, 206, "matching If-Range")
        expect_eq(r.body, pattern(100)[:10], "206 body")
        r = fetch(c.port, path, headers=[("Range", "bytes=0-9"),
                                         ("If-Range", '"other"')])
        expect_eq(r.status, 200, "other If-Range")
        expect_eq(r.body, pattern(100), "200 body")
        expect_hit(r)
        expect_origin(o, path, 1)


def test_9110_14_range_miss_passed_through():
    """RFC 9110 14 (range.write 0): a Range miss goes to the origin with its
    Range, and the partial answer is not stored."""
    path = "/rgpass"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               {"status": 206, "body": "ABCDEFGHIJ", "headers": [
                   ("Cache-Control", "max-age=60"),
                   ("Content-Range", "bytes 0-9/100")]},
               ok("Z" * 100, Cache_Control="max-age=60"))
        r = fetch(c.port, path, headers=[("Range", "bytes=0-9")])
        expect_eq(r.status, 206, "status")
        expect_eq(r.body, b"ABCDEFGHIJ", "body")
        expect_eq(r.header("Content-Range"), "bytes 0-9/100", "Content-Range")
        r2 = fetch(c.port, path)
        expect_not_hit(r2, "full GET after the range")
        expect_eq(r2.body, b"Z" * 100, "full body")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[0], "Range"), "bytes=0-9", "Range at the origin")


def test_9110_14_range_write_stores_whole_object():
    """RFC 9110 14 (range.write 1): a Range miss fetches the whole object
    (the origin sees no Range), stores it, and later ranges are hits."""
    path = hp("/rgw/bytes/500", ("Cache-Control", "max-age=60"))
    recs = {"proxy.config.http.cache.range.write": 1}
    with Origin() as o, daemon(o, recs) as c:
        r1 = fetch(c.port, path, headers=[("Range", "bytes=100-199")])
        expect(r1.status in (200, 206), "first status %d" % r1.status)
        if r1.status == 200:
            expect_eq(r1.body, pattern(500), "first body (whole)")
        else:
            expect_eq(r1.body, pattern(500)[100:200], "first body (range)")
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path, headers=[("Range", "bytes=200-209")])
        expect_eq(r2.status, 206, "second status")
        expect_hit(r2, "second")
        expect_eq(r2.body, pattern(500)[200:210], "second body")
        qs = expect_origin(o, path, 1)
        expect_eq(qh(qs[0], "Range"), None, "Range at the origin")


# ---------------------------------------------------------------------------
# RFC 9111 4.4: invalidation

def test_4_4_unsafe_methods_invalidate():
    """RFC 9111 4.4: POST, PUT, DELETE answered 2xx invalidate the URL: the
    next GET goes to the origin."""
    with Origin() as o, daemon(o) as c, Collector() as col:
        for m in ("POST", "PUT", "DELETE"):
            with col.case(m):
                path = "/inv-%s" % m.lower()
                script(o, path, ok("v1", Cache_Control="max-age=60"),
                       {"status": 204 if m == "DELETE" else 200,
                        "body": "" if m == "DELETE" else "done"},
                       ok("v2", Cache_Control="max-age=60"))
                fetch(c.port, path)
                expect_hit(fetch(c.port, path), "GET before %s" % m)
                r = fetch(c.port, path, method=m,
                          body=None if m == "DELETE" else b"x=1")
                expect(200 <= r.status < 300, "%s status %d" % (m, r.status))
                expect_cs(r, r"fwd=method", m)
                g = fetch(c.port, path)
                expect_not_hit(g, "GET after %s" % m)
                expect_eq(g.body, b"v2", "GET body after %s" % m)
                qs = expect_origin(o, path, 3)
                expect_eq([q["method"] for q in qs], ["GET", m, "GET"],
                          "methods at the origin")


def test_4_4_error_does_not_invalidate():
    """RFC 9111 4.4: an unsafe method answered 5xx leaves the object."""
    path = "/inv-5xx"
    with Origin() as o, daemon(o) as c:
        script(o, path, ok("v1", Cache_Control="max-age=60"),
               {"status": 500, "body": "failed"})
        fetch(c.port, path)
        r = fetch(c.port, path, method="POST", body=b"x=1")
        expect_eq(r.status, 500, "POST status")
        g = fetch(c.port, path)
        expect_hit(g, "GET after the failed POST")
        expect_eq(g.body, b"v1", "body")
        expect_origin(o, path, 2)


def test_4_4_location_and_content_location_invalidated():
    """RFC 9111 4.4: the Location and Content-Location URLs of a 2xx to an
    unsafe method are invalidated when on the same host (relative or
    absolute); a Location on another host is not."""
    with Origin() as o, Origin() as o2, daemon(
            o, remap=remap_for(o, o2, hosts=(HOST, "other.test"))) as c:
        cc = ("Cache-Control", "max-age=60")
        rel, ab, other = (hp("/loc-%s/bytes/5" % n, cc)
                          for n in ("rel", "abs", "other"))
        for p in (rel, ab):
            fetch(c.port, p)
        fetch(c.port, other, host="other.test")
        script(o, "/loc-post", {"status": 201, "body": "created", "headers": [
            ("Location", rel),
            ("Content-Location", "http://%s%s" % (o.authority, ab))]})
        script(o, "/loc-post2", {"status": 201, "body": "created", "headers": [
            ("Location", "http://%s%s" % (o2.authority, other))]})
        r = fetch(c.port, "/loc-post", method="POST", body=b"x")
        expect_eq(r.status, 201, "POST status")
        r = fetch(c.port, "/loc-post2", method="POST", body=b"x")
        expect_eq(r.status, 201, "second POST status")
        with Collector() as col:
            for what, p in (("relative Location", rel),
                            ("absolute Content-Location", ab)):
                with col.case(what):
                    g = fetch(c.port, p)
                    expect_not_hit(g, "GET %s" % p)
                    expect_origin(o, p, 2)
            with col.case("Location on another host"):
                g = fetch(c.port, other, host="other.test")
                expect_hit(g, "GET on the other host")
                expect_origin(o2, other, 1)


def test_4_4_location_invalidated_under_the_cache_key_origin():
    """RFC 9111 4.4: the Location URL is invalidated as the cache keys it:
    under the remapped URL's origin, not the host the request went to
    (a parent.config origin pool), and with what else the key names (the
    client's Host under pristine_host_hdr)."""
    cc = ("Cache-Control", "max-age=60")
    gone, kept = hp("/inv-gone/bytes/5", cc), hp("/inv-kept/bytes/5", cc)
    with Collector() as col:
        for what in ("parent pool", "pristine_host_hdr"):
            with col.case(what), Origin() as o:
                if what == "parent pool":
                    pc = ('dest_domain=pool.test parent="127.0.0.1:%d" '
                          'parent_is_proxy=false\n' % o.port)
                    kw = dict(remap=["map http://%s/ http://pool.test/" % HOST],
                              files={"parent.config": pc})
                else:
                    kw = dict(records={"proxy.config.url_remap.pristine_host_hdr": 1})
                with daemon(o, **kw) as c:
                    for p in (gone, kept):
                        fetch(c.port, p)
                    script(o, "/inv-post", {"status": 201, "body": "created",
                                            "headers": [("Location", gone)]})
                    expect_eq(fetch(c.port, "/inv-post", method="POST", body=b"x").status,
                              201, "POST status")
                    expect_not_hit(fetch(c.port, gone), "the Location's URL")
                    expect_hit(fetch(c.port, kept), "another URL")
                    expect_origin(o, gone, 2)


# ---------------------------------------------------------------------------
# RFC 5861: stale-while-revalidate, stale-if-error

def test_5861_3_stale_while_revalidate_in_window():
    """RFC 5861 3: within stale-while-revalidate the stale object is served
    at once and the origin sees exactly one background request."""
    path = "/swr"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("old", Cache_Control="max-age=1, stale-while-revalidate=30"),
               dict(ok("new", Cache_Control="max-age=60"), delay_ms=1000))
        s = align()
        fetch(c.port, path)
        at(s + 1)
        t0 = time.monotonic()
        rs = [fetch(c.port, path) for _ in range(3)]
        took = time.monotonic() - t0
        for i, r in enumerate(rs):
            expect_eq(r.status, 200, "stale %d status" % i)
            expect_eq(r.body, b"old", "stale %d body" % i)
            expect_cs(r, r"^cistern; hit; ttl=-?\d+; "
                      r"detail=stale-while-revalidate", "stale %d" % i)
        expect(took < 0.8, "three stale answers took %.2fs (the origin "
               "answers after 1 s): not served at once" % took)
        o.wait_requests(2, timeout=5)
        harness.wait_for(lambda: fetch(c.port, path).body == b"new",
                         timeout=5, what="the refreshed object")
        r = fetch(c.port, path)
        expect_hit(r, "after the refresh")
        expect_eq(r.body, b"new", "body after the refresh")
        expect_origin(o, path, 2)


def test_5861_3_stale_while_revalidate_outside_window():
    """RFC 5861 3: after the stale-while-revalidate window a stale object is
    revalidated before it is used."""
    path = "/swr-out"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("old", Cache_Control="max-age=1, stale-while-revalidate=1",
                  ETag='"s1"'),
               ok("new", Cache_Control="max-age=60", ETag='"s2"'))
        s = align()
        fetch(c.port, path)
        at(s + 2)
        r = fetch(c.port, path)
        expect_eq(r.body, b"new", "body")
        expect_cs(r, r"fwd=stale; fwd-status=200", "outside the window")
        qs = expect_origin(o, path, 2)
        expect_eq(qh(qs[1], "If-None-Match"), '"s1"', "If-None-Match")


def _stale_if_error(path, first_headers):
    with Origin() as o, daemon(o) as c:
        script(o, path, ok("old", **first_headers),
               {"status": 503, "body": "down"})
        s = align()
        fetch(c.port, path)
        at(s + 1)
        r = fetch(c.port, path)
        expect_eq(r.status, 200, "status")
        expect_eq(r.body, b"old", "body")
        expect_cs(r, r"fwd-status=503; detail=stale-if-error", "stale")
        expect(r.header("Age") is not None, "no Age")
        expect_origin(o, path, 2)


def test_5861_4_stale_if_error_in_window():
    """RFC 5861 4: within stale-if-error, an origin 5xx is answered with the
    stale object (an object without validators)."""
    _stale_if_error("/sie", {"Cache_Control": "max-age=1, stale-if-error=60"})


def test_5861_4_stale_if_error_in_window_with_etag():
    """RFC 5861 4: within stale-if-error, an origin 5xx to the conditional
    revalidation is answered with the stale object."""
    _stale_if_error("/sie-etag", {"Cache_Control":
                                  "max-age=1, stale-if-error=60",
                                  "ETag": '"se"'})


def test_5861_4_stale_if_error_origin_down():
    """RFC 5861 4: within stale-if-error, an origin that cannot be reached
    is replaced by the stale object."""
    path = hp("/sie-down/bytes/30",
              ("Cache-Control", "max-age=1, stale-if-error=60"))
    o = Origin()
    try:
        with daemon(o) as c:
            s = align()
            fetch(c.port, path)
            expect_origin(o, path, 1)
            o.stop()
            at(s + 1)
            r = fetch(c.port, path)
            expect_eq(r.status, 200, "status")
            expect_eq(r.body, pattern(30), "body")
            expect_cs(r, r"detail=stale-if-error", "stale")
    finally:
        o.stop(check=False)


def test_5861_4_stale_if_error_not_with_must_revalidate():
    """RFC 9111 5.2.2.2 / RFC 5861 4: stale-if-error does not apply to an
    object stored with must-revalidate or no-cache (CACHING.md): the
    origin's 5xx goes to the client."""
    with Origin() as o, daemon(o) as c, Collector() as col:
        for name, ccv in (("no-cache", "no-cache, stale-if-error=60"),
                          ("must-revalidate",
                           "max-age=1, must-revalidate, stale-if-error=60")):
            with col.case(name):
                path = "/sie-" + name
                script(o, path, ok("old", Cache_Control=ccv, ETag='"x"'),
                       {"status": 503, "body": "down"})
                s = align()
                fetch(c.port, path)
                at(s + 1)
                r = fetch(c.port, path)
                expect_eq((r.status, r.body), (503, b"down"),
                          "status and body (Cache-Status %r)" % cs(r))
                qs = expect_origin(o, path, 2)
                expect_eq(qh(qs[1], "If-None-Match"), '"x"', "If-None-Match")


def test_5861_4_stale_if_error_outside_window():
    """RFC 5861 4: after the stale-if-error window the error goes to the
    client."""
    path = "/sie-out"
    with Origin() as o, daemon(o) as c:
        script(o, path,
               ok("old", Cache_Control="max-age=1, stale-if-error=1"),
               {"status": 503, "body": "down"})
        s = align()
        fetch(c.port, path)
        at(s + 2)
        r = fetch(c.port, path)
        expect_eq(r.status, 503, "status")
        expect_eq(r.body, b"down", "body")
        expect_origin(o, path, 2)


# ---------------------------------------------------------------------------
# RFC 9211: Cache-Status

def test_9211_cache_status_values():
    """RFC 9211 2: fwd=uri-miss with stored, hit with ttl, fwd=stale with
    fwd-status=304."""
    path = hp("/cst/etag/cs/bytes/10", ("Cache-Control", "max-age=1"))
    with Origin() as o, daemon(o) as c:
        s = align()
        r = fetch(c.port, path)
        expect_eq(cs(r), "cistern; fwd=uri-miss; fwd-status=200; stored",
                  "miss")
        r = fetch(c.port, path)
        expect_eq(cs(r), "cistern; hit; ttl=1", "hit")
        at(s + 1)
        r = fetch(c.port, path)
        expect_eq(cs(r), "cistern; fwd=stale; fwd-status=304", "revalidated")
        expect_origin(o, path, 2)


def test_9211_cache_status_on_every_response():
    """RFC 9211 2: every response has a Cache-Status, including our own
    404 (unmapped host), 416, 304, 504 and origin errors."""
    with Origin() as o, daemon(o) as c, Collector() as col:
        path = hp("/every/etag/e/bytes/10", ("Cache-Control", "max-age=60"))
        fetch(c.port, path)
        cases = [
            ("unmapped host 404", dict(path="/", host="unmapped.test"), 404),
            ("origin 404", dict(path="/x/status/404"), 404),
            ("POST", dict(path="/p", method="POST", body=b"x"), 200),
            ("304", dict(path=path, headers=[("If-None-Match", '"e"')]), 304),
            ("416", dict(path=path, headers=[("Range", "bytes=99-")]), 416),
            ("504", dict(path="/none", headers=[
                ("Cache-Control", "only-if-cached")]), 504),
            ("HEAD", dict(path=path, method="HEAD"), 200),
        ]
        for what, kw, status in cases:
            with col.case(what):
                r = fetch(c.port, kw.pop("path"), **kw)
                expect_eq(r.status, status, "status")
                expect(re.match(r"cistern(;|$)", cs(r)),
                       "Cache-Status %r" % cs(r))


# ---------------------------------------------------------------------------
# RFC 9213: CDN-Cache-Control

def test_9213_cdn_cache_control_overrides():
    """RFC 9213 2: CDN-Cache-Control: max-age=60 with Cache-Control:
    no-store is stored (default cdn_cache_control 1); both are passed on."""
    path = hp("/cdn/bytes/10", ("CDN-Cache-Control", "max-age=60"),
              ("Cache-Control", "no-store"))
    with Origin() as o, daemon(o) as c:
        r1 = fetch(c.port, path)
        expect_cs(r1, r"stored", "first")
        r2 = fetch(c.port, path)
        expect_hit(r2, "second")
        expect(55 <= ttl(r2) <= 60, "ttl %d" % ttl(r2))
        expect_eq(r2.header("Cache-Control"), "no-store", "Cache-Control")
        expect_eq(r2.header("CDN-Cache-Control"), "max-age=60",
                  "CDN-Cache-Control")
        expect_origin(o, path, 1)


def test_9213_invalid_cdn_cache_control_ignored():
    """RFC 9213 2.1: an invalid CDN-Cache-Control (max-age="60", a string)
    is ignored whole: Cache-Control: no-store applies."""
    path = hp("/cdnbad/bytes/10", ("CDN-Cache-Control", 'max-age="60"'),
              ("Cache-Control", "no-store"))
    with Origin() as o, daemon(o) as c:
        _never_stored(c, o, path, "no-store")


def test_9213_cdn_cache_control_off():
    """RFC 9213 (cdn_cache_control 0): the field is ignored."""
    path = hp("/cdnoff/bytes/10", ("CDN-Cache-Control", "max-age=60"),
              ("Cache-Control", "no-store"))
    with Origin() as o, daemon(o, {"proxy.config.cistern.cdn_cache_control":
                                   0}) as c:
        _never_stored(c, o, path, "no-store")


# ---------------------------------------------------------------------------
# The http-cache-tests suite, whole (CISTERN_CACHE_TESTS, as test_partial's
# partial-* cases): every test that does not pass against Cistern, and why.
# The suite's kinds: required, optimal (a "should"), check (a question
# with no right answer).  A test that passes again, or one that newly
# fails, fails test_cache_tests_whole_suite: the list is the record.

CT_WHY = {
    # RFC 9111 5.1: an invalid Age "SHOULD" be ignored and a list's first
    # member used; the suite (0.4.5) wants these responses stale instead,
    # and contradicts itself (age-parse-prefix `0,7200` must be fresh,
    # `0` then `7200` on two lines stale).
    "age-parse": ["age-parse-nonnumeric", "age-parse-negative", "age-parse-float",
                  "age-parse-prefix-twoline", "age-parse-dup-0", "age-parse-dup-0-twoline",
                  "age-parse-dup-old", "age-parse-parameter", "age-parse-numeric-parameter"],
    # checks: an invalid or conflicting max-age is stale (RFC 9111 4.2.1
    # encourages it); an Expires that is not an HTTP-date (or past 2038
    # without a comma, upper case, ...) is in the past (5.3: MUST)
    "invalid freshness is stale": [
        "freshness-max-age-decimal-zero", "freshness-max-age-decimal-five",
        "freshness-max-age-a100", "freshness-max-age-100a", "freshness-max-age-multiple-line",
        "freshness-max-age-multiple-directive", "freshness-max-age-two-stale-fresh-sameline",
        "freshness-max-age-two-fresh-stale-sameline", "freshness-max-age-two-stale-fresh-sepline",
        "freshness-max-age-two-fresh-stale-sepline", "freshness-expires-32bit",
        "freshness-expires-far-future", "freshness-expires-wrong-case-month",
        "freshness-expires-wrong-case-tz", "freshness-expires-invalid-utc",
        "freshness-expires-invalid-aest", "freshness-expires-invalid-2-digit-year",
        "freshness-expires-invalid-no-comma", "freshness-expires-invalid-multiple-spaces",
        "freshness-expires-invalid-date-dashes", "freshness-expires-invalid-time-periods",
        "freshness-expires-invalid-1-digit-hour", "freshness-expires-invalid-multiple-lines"],
    # checks: no stale answer when the origin fails (negative_revalidating
    # 0); the required stale-close-* depend on stale-close, and count our
    # own 502 (no Server-Request-Count) as "from cache" anyway; Warning is
    # obsolete (RFC 9111 5.5)
    "no stale on error": ["stale-close", "stale-503", "stale-close-must-revalidate",
                          "stale-close-proxy-revalidate", "stale-close-no-cache",
                          "stale-close-s-maxage=2", "stale-warning-stored",
                          "stale-warning-become"],
    # optimal: POST responses are not cached (ATS's cache_post_method 0)
    "no POST": ["method-POST"],
    # checks: a request with no-store is forwarded (RFC 9111 5.2.1.5 only
    # forbids storing what answers it: either is right); Pragma: no-cache
    # without Cache-Control is no-cache (5.4: MUST)
    "request directives": ["ccreq-no-store", "pragma-request-no-cache"],
    # optimal: Accept-Language's order and q-values choose the language:
    # not ours to reorder or match against Content-Language
    "vary semantics": ["vary-normalise-lang-order", "vary-normalise-lang-select"],
    # optimal: without Last-Modified, If-Modified-Since is compared with
    # Date (RFC 9111 4.3.2), which is after it here: a 200 is right
    "ims against Date": ["conditional-lm-fresh-no-lm"],
    # checks: ETags that are not entity-tags (unquoted, `w/`, backslash,
    # obs-text the client re-encodes) or not sent when a Vary value
    # differs (a MAY: the origin's then unasked-for 304 is a 502)
    "etag syntax": ["conditional-etag-strong-respond-obs-text",
                    "conditional-etag-quoted-respond-unquoted",
                    "conditional-etag-unquoted-respond-unquoted",
                    "conditional-etag-unquoted-respond-quoted",
                    "conditional-etag-weak-respond-lowercase",
                    "conditional-etag-weak-respond-backslash",
                    "conditional-etag-weak-respond-omit-slash",
                    "conditional-etag-vary-headers-mismatch",
                    "conditional-etag-strong-generate-unquoted",
                    "conditional-etag-forward-unquoted"],
    # Set-Cookie is never shared (cistern.cache.set_cookie 0): not stored
    "set-cookie": ["headers-store-Set-Cookie", "304-etag-update-response-Set-Cookie",
                   "other-set-cookie"],
    # check: RFC 9111 4.3.5 updates from a HEAD's 200 only; a 410 is passed on
    "head 410": ["head-410-update"],
    # optimal: a 206 saying bytes 4-9 with 5 bytes is not stored (see
    # test_partial's CT_INCONSISTENT)
    "inconsistent 206": ["partial-store-partial-reuse-partial",
                         "partial-store-partial-reuse-partial-byterange",
                         "partial-store-partial-reuse-partial-absent",
                         "partial-store-partial-reuse-partial-suffix"],
    # check: Surrogate-Capability is not sent (Edge Architecture, not HTTP)
    "surrogate": ["surrogate-append-capabilities"],
}


@harness.timeout(300)
def test_cache_tests_whole_suite():
    """The whole http-cache-tests suite against Cistern: no test outside
    CT_WHY (each there with the reason it does not pass) fails, twice."""
    known = {t for ts in CT_WHY.values() for t in ts}
    with harness.CacheTests() as ct:
        kinds = ct.tests()
        cport = harness.free_port()
        # The suite's server (node) closes a connection idle for 5 s: one
        # it closes as we reuse it fails a PUT of the suite's own (not
        # retried), so ours are given up sooner.
        recs = {"proxy.config.http.server_ports": str(cport),
                "proxy.config.http.keep_alive_no_activity_timeout_out": 2}
        with Cistern(storage=["cache 256M"], records=recs,
                     remap=["map http://127.0.0.1:%d/ http://127.0.0.1:%d/" % (cport, ct.port)]):
            res = ct.run(cport, timeout=240)
            failing = {t for t in kinds if res.get(t) is not True}
            if failing - known:
                # a test of the suite's timing (its own sleeps) on a loaded
                # machine: it fails again on a second run to count
                again = ct.run(cport, timeout=240)
                failing = {t for t in failing if again.get(t) is not True} | (failing & known)
    new = sorted("%s (%s): %s" % (t, kinds[t], res.get(t)) for t in failing - known)
    fixed = sorted(known - failing)
    expect(not new, "tests that newly fail (twice): %s" % "; ".join(new))
    if fixed:   # good news, not a failure: a flaky pass must not fail CI
        print("    tests in CT_WHY that passed this time: %s" % ", ".join(fixed))
    expect_eq(len(kinds), 350, "tests in the suite (0.4.5)")


if __name__ == "__main__":
    harness.main()
