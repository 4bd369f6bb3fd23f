#!/usr/bin/env python3
"""End-to-end tests of invalidation (issue 23): purge by tag, prefix, host,
all, soft or hard, through POST /_purge, PURGE and `cistern ctl`.

Every object's fate is checked one by one: a purged object is a miss (the
origin sees the request: its X-Origin-Seq changes), every other one is still
a hit; N in the answer is compared with the number of objects the test
itself knows match.  Objects come from the origin's `headers` directive, so
their Surrogate-Key and Cache-Tag fields are the test's choice.
"""

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import harness
from harness import Cistern, Collector, Origin, expect, expect_eq, is_hit

STORE = ["cache 64M"]


def remap_for(*pairs):
    return ["map http://%s/ http://%s/" % (h, o.authority) for h, o in pairs]


def obj_path(i, skey=None, ctag=None, cc="max-age=600", extra=()):
    q = [("Cache-Control", cc)]
    if skey:
        q.append(("Surrogate-Key", skey))
    if ctag:
        q.append(("Cache-Tag", ctag))
    q += list(extra)
    return "/o/%d/headers?%s" % (i, urllib.parse.urlencode(q, quote_via=urllib.parse.quote))


def get(port, path, host, headers=()):
    r = harness.one_request(port, "GET", path, host=host, headers=headers)
    expect(r is not None, "GET %s: no complete response" % path)
    expect_eq(r.status, 200, "GET %s status" % path)
    return r


def seq(r):
    return int(r.header("X-Origin-Seq", "0"))


def purge(port, query, src=None, method="POST"):
    r = harness.one_request(port, method, "/_purge?" + query, host="localhost",
                            src=src, body=b"" if method == "POST" else None)
    expect(r is not None, "/_purge?%s: no answer" % query)
    return r


def purged(port, query):
    r = purge(port, query)
    expect_eq(r.status, 200, "/_purge?%s status (%r)" % (query, r.body[:200]))
    expect_eq(r.header("Content-Type"), "application/json", "Content-Type")
    return json.loads(r.body.decode())


def fill_all(port, objs, workers=8):
    """GET every (host, path) twice: stored, then a hit.  Returns
    {(host, path): the origin seq of the stored copy}."""
    def one(hp):
        h, p = hp
        r1 = get(port, p, h)
        r2 = get(port, p, h)
        expect(is_hit(r2), "%s%s not stored: %r" % (h, p, r2.header("Cache-Status")))
        expect_eq(seq(r2), seq(r1), "%s%s: the hit's seq" % (h, p))
        return hp, seq(r1)
    with ThreadPoolExecutor(workers) as ex:
        return dict(ex.map(one, objs))


def check_fates(port, stored, gone, workers=8):
    """Each object in gone misses (a new origin fetch), every other stored
    one hits with its stored copy.  Returns the new seqs of the missed."""
    errors, renewed = [], {}

    def one(hp):
        h, p = hp
        r = get(port, p, h)
        if hp in gone:
            if is_hit(r) or seq(r) == stored[hp]:
                errors.append("purged %s%s still served (%s)" % (h, p, r.header("Cache-Status")))
            return hp, seq(r)
        if not is_hit(r) or seq(r) != stored[hp]:
            errors.append("%s%s not purged but missed (%s)" % (h, p, r.header("Cache-Status")))
        return hp, stored[hp]
    with ThreadPoolExecutor(workers) as ex:
        for hp, s in ex.map(one, list(stored)):
            renewed[hp] = s
    expect(not errors, "%d wrong: %s" % (len(errors), "; ".join(errors[:5])))
    return renewed


# ---------------------------------------------------------------------------

def test_tags_overlapping_1000():
    """1,000 objects with overlapping tags (Surrogate-Key and Cache-Tag):
    a tag purge misses exactly its objects, N exact; two tags at once count
    an object once; tags never reach the client."""
    def tags(i):
        return "s%d t%d all" % (i % 3, i % 7), "c%d, shared one" % (i % 5)
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o))) as c:
        objs = [("a.test", obj_path(i, *tags(i))) for i in range(1000)]
        stored = fill_all(c.port, objs)
        r = get(c.port, objs[0][1], "a.test")
        expect(r.header("Surrogate-Key") is None and r.header("Cache-Tag") is None,
               "tags sent to the client on a hit")
        r = get(c.port, obj_path(5000, "x"), "a.test")
        expect(r.header("Surrogate-Key") is None, "tags sent to the client on a miss")

        gone = {objs[i] for i in range(1000) if i % 3 == 1}
        a = purged(c.port, "tag=s1")
        expect_eq(a, {"purged": len(gone), "soft": False}, "answer")
        stored = check_fates(c.port, stored, gone)

        # c2 (Cache-Tag, comma list) and t4 (Surrogate-Key) overlap: each
        # object once; objects refilled since s1 count again
        gone = {objs[i] for i in range(1000) if i % 5 == 2 or i % 7 == 4}
        a = purged(c.port, "tag=c2&tag=t4")
        expect_eq(a["purged"], len(gone), "N of two tags")
        stored = check_fates(c.port, stored, gone)

        # a tag with a space inside a Cache-Tag item, and an unknown tag
        expect_eq(purged(c.port, "tag=nothing")["purged"], 0, "unknown tag")
        a = purged(c.port, "tag=" + urllib.parse.quote("shared one"))
        expect_eq(a["purged"], 1000, "the tag every object has")
        st = harness.cache_stats(c.port)
        expect_eq(st["proxy.process.cistern.purges.tag"], 4, "tag purges counted")
        expect_eq(st["proxy.process.cistern.purged_objects"],
                  333 + len(gone) + 1000, "objects purged counted")


@harness.timeout(180)
def test_prefix_and_host():
    """prefix= and host= map through remap.config like the URLs clients
    send: exactly the objects under the prefix / of the host go."""
    with Origin() as o1, Origin() as o2, \
            Cistern(storage=STORE, remap=remap_for(("a.test", o1), ("b.test", o2))) as c:
        objs = []
        for h in ("a.test", "b.test"):
            for d in ("img", "css", "imgx"):
                for i in range(40):
                    objs.append((h, "/%s/%d" % (d, i)))
        objs = [(h, p + "/headers?Cache-Control=max-age%3D600") for h, p in objs]
        stored = fill_all(c.port, objs)
        gone = {hp for hp in objs if hp[0] == "a.test" and hp[1].startswith("/img/")}
        a = purged(c.port, "prefix=" + urllib.parse.quote("http://a.test/img/", safe=""))
        expect_eq(a, {"purged": 40, "soft": False}, "prefix answer")
        stored = check_fates(c.port, stored, gone)

        gone = {hp for hp in objs if hp[0] == "b.test"}
        a = purged(c.port, "host=b.test")
        expect_eq(a["purged"], 120, "host answer")
        stored = check_fates(c.port, stored, gone)

        # refused: not POST, a prefix no rule maps, two kinds, nothing asked
        expect_eq(purge(c.port, "host=b.test", method="GET").status, 405, "GET /_purge")
        expect_eq(purge(c.port, "prefix=http%3A%2F%2Fnowhere.test%2F").status, 400,
                  "unmapped prefix")
        expect_eq(purge(c.port, "tag=a&host=b.test").status, 400, "two kinds")
        expect_eq(purge(c.port, "").status, 400, "nothing to purge")
        expect_eq(purge(c.port, "all=1", src="127.0.0.2").status, 403,
                  "a client ip_allow does not let PURGE")
        check_fates(c.port, stored, set())
        c.expect_log(r"purge")


def test_soft_revalidates_304_keeps():
    """soft=1: the next request revalidates (the origin sees If-None-Match),
    a 304 keeps the stored body; PURGE with Fastly-Soft-Purge: 1 too;
    stale-while-revalidate still applies; the purged tags stay indexed."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o))) as c:
        p = "/etag/v1" + obj_path(1, "soft")
        r1 = get(c.port, p, "a.test")
        expect(is_hit(get(c.port, p, "a.test")), "stored")
        o.reset()
        expect_eq(purged(c.port, "tag=soft&soft=1"), {"purged": 1, "soft": True}, "answer")
        r = get(c.port, p, "a.test")
        reqs = o.requests()
        expect_eq(len(reqs), 1, "origin requests after a soft purge")
        expect_eq(harness.header_of(reqs[0], "If-None-Match"), '"v1"', "conditional")
        expect_eq(r.body, r1.body, "body kept")
        r = get(c.port, p, "a.test")
        expect(is_hit(r), "fresh again after the 304: %r" % r.header("Cache-Status"))
        expect_eq(len(o.requests()), 1, "no more origin requests")

        # soft again (the 304 refreshed it, its tags are still known)
        expect_eq(purged(c.port, "tag=soft&soft=1")["purged"], 1, "soft after a 304")

        # PURGE + Fastly-Soft-Purge: 1
        p2 = "/etag/v2" + obj_path(2)
        get(c.port, p2, "a.test")
        o.reset()
        r = harness.one_request(c.port, "PURGE", p2, host="a.test",
                                headers=[("Fastly-Soft-Purge", "1")])
        expect_eq(r.status, 200, "soft PURGE")
        get(c.port, p2, "a.test")
        reqs = o.requests()
        expect(len(reqs) == 1 and harness.header_of(reqs[0], "If-None-Match") == '"v2"',
               "soft PURGE then GET: %r" % reqs)

        # stale-while-revalidate: served at once, revalidated behind
        p3 = "/etag/v3" + obj_path(3, "swr", cc="max-age=600, stale-while-revalidate=60")
        get(c.port, p3, "a.test")
        o.reset()
        purged(c.port, "tag=swr&soft=1")
        r = get(c.port, p3, "a.test")
        expect("stale-while-revalidate" in r.header("Cache-Status", ""),
               "served stale: %r" % r.header("Cache-Status"))
        o.wait_requests(1)
        expect_eq(harness.header_of(o.requests()[0], "If-None-Match"), '"v3"',
                  "background revalidation")
        st = harness.cache_stats(c.port)
        expect_eq(st["proxy.process.cistern.purges_soft"], 4, "soft purges counted")


def test_soft_purge_collapses():
    """A soft purge of a popular object, then 30 clients at once: the origin
    sees one conditional request (collapsed forwarding holds)."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o))) as c:
        p = "/delay/300/etag/h" + obj_path(1, "hot")
        get(c.port, p, "a.test")
        o.reset()
        expect_eq(purged(c.port, "tag=hot&soft=1")["purged"], 1, "N")
        with ThreadPoolExecutor(30) as ex:
            rs = list(ex.map(lambda _: get(c.port, p, "a.test"), range(30)))
        expect(all(r.status == 200 for r in rs), "every answer 200")
        expect_eq(len(o.requests()), 1, "origin requests for 30 clients")


def test_purge_survives_kill9():
    """The answer comes after the commit: kill -9 of the whole tree right
    after it, restart, and the purged objects are still gone."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o))) as c:
        objs = [("a.test", obj_path(i, "k%d" % (i % 2))) for i in range(60)]
        stored = fill_all(c.port, objs)
        a = purged(c.port, "tag=k0")
        c.kill()
        expect_eq(a["purged"], 30, "N")
        c.start()
        check_fates(c.port, stored, {objs[i] for i in range(0, 60, 2)})


@harness.timeout(180)
def test_purge_under_200_readers():
    """200 clients read 100 tagged objects; a purge of them: no request
    that starts after the 200 gets a copy stored before it."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o)),
                                records={"proxy.config.net.connections_throttle": 4000}) as c:
        objs = [("a.test", obj_path(i, "live")) for i in range(100)]
        stored = fill_all(c.port, objs)
        old = set(stored.values())
        stop = threading.Event()
        log, errors = [], []

        def reader(k):
            n = k
            while not stop.is_set():
                h, p = objs[n % len(objs)]
                n += 7
                t0 = time.monotonic()
                r = harness.one_request(c.port, "GET", p, host=h, timeout=30)
                if r is None or r.status != 200:
                    errors.append("%s: %r" % (p, r and r.status))
                    continue
                log.append((t0, seq(r)))
        ts = [threading.Thread(target=reader, args=(k,)) for k in range(200)]
        for t in ts:
            t.start()
        time.sleep(2.0)
        a = purged(c.port, "tag=live")
        t_answer = time.monotonic()
        time.sleep(2.0)
        stop.set()
        for t in ts:
            t.join(30)
        expect(not errors, "reader errors: %s" % errors[:5])
        expect_eq(a["purged"], 100, "N")
        after = [s for t0, s in log if t0 > t_answer]
        expect(len(after) > 100, "too few requests after the purge: %d" % len(after))
        bad = [s for s in after if s in old]
        expect(not bad, "%d of %d requests after the answer got a purged copy"
               % (len(bad), len(after)))


def test_all_ctl_metrics_forward_tags():
    """all=1 and its count, cistern ctl's grouped forms, the counters in
    /_metrics (promtool clean), forward_tags 1 passing the fields on."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o)),
                                records={"proxy.config.cistern.purge.forward_tags": 1}) as c:
        objs = [("a.test", obj_path(i, "g%d" % (i % 4), "ct%d" % (i % 2))) for i in range(40)]
        stored = fill_all(c.port, objs)
        r = get(c.port, objs[1][1], "a.test")
        expect_eq(r.header("Surrogate-Key"), "g1", "forward_tags 1: Surrogate-Key kept")
        expect_eq(r.header("Cache-Tag"), "ct1", "forward_tags 1: Cache-Tag kept")

        def ctl(*args):
            return subprocess.run([harness.cistern_bin(), "ctl", "-c", c.confdir] + list(args),
                                  capture_output=True, text=True, timeout=30)
        p = ctl("cache", "purge", "--tag", "g0", "--tag", "g1")
        expect_eq(p.returncode, 0, "ctl --tag: %s %s" % (p.stdout, p.stderr))
        expect(re.search(r"purged\s+20\b", p.stdout), "ctl --tag answer: %r" % p.stdout)
        stored = check_fates(c.port, stored, {objs[i] for i in range(40) if i % 4 < 2})
        p = ctl("cache", "purge", "--prefix", "http://a.test/o/3", "--soft")
        expect(re.search(r"purged\s+11\b", p.stdout), "ctl --prefix --soft: %r %r" % (p.stdout, p.stderr))
        p = ctl("cache", "purge", "--host", "a.test")
        expect(re.search(r"purged\s+40\b", p.stdout), "ctl --host: %r" % p.stdout)
        fill_all(c.port, objs[:10])
        p = ctl("cache", "purge", "--bogus")
        expect_eq(p.returncode, 1, "ctl usage")
        expect_eq(purged(c.port, "all=1"), {"purged": 10, "soft": False}, "all")
        check_fates(c.port, {hp: 0 for hp in objs[:10]}, set(objs[:10]))
        expect_eq(purged(c.port, "all=1&soft=1")["purged"], 10, "all, soft")

        m = harness.one_request(c.port, "GET", "/_metrics").body.decode()
        for want in ('cistern_purges_total{kind="tag"} 1', 'cistern_purges_total{kind="all"} 2',
                     'cistern_purges_total{kind="prefix"} 1', 'cistern_purges_total{kind="host"} 1',
                     "cistern_purges_soft_total 2", "cistern_purged_objects_total 91"):
            expect(want in m, "/_metrics lacks %r" % want)
        if shutil.which("promtool"):
            pr = subprocess.run(["promtool", "check", "metrics"], input=m,
                                capture_output=True, text=True, timeout=30)
            expect_eq(pr.returncode, 0, "promtool: %s %s" % (pr.stdout, pr.stderr))


def test_fill_across_purge_stored_stale():
    """A miss whose origin fetch began before a purge and whose fill
    commits after it may hold what the purge meant to remove: it is stored
    stale, so the next request revalidates instead of getting it fresh
    (the head late: the purge before the fill began; the body slow: during
    the fill)."""
    with Origin() as o, Cistern(storage=STORE, remap=remap_for(("a.test", o))) as c:
        for k, pre in enumerate(("/delay/1500", "/slow-body/1000/150/etag/b")):
            p = pre + obj_path(1, "race%d" % k)
            o.reset()
            t = threading.Thread(target=get, args=(c.port, p, "a.test"))
            t.start()
            time.sleep(0.5)
            expect_eq(purged(c.port, "tag=race%d" % k)["purged"], 0, "N (nothing stored yet)")
            t.join(30)
            r = get(c.port, p, "a.test")
            expect(not is_hit(r) or "stale" in r.header("Cache-Status", ""),
                   "%s: the copy fetched across the purge served fresh: %r"
                   % (pre, r.header("Cache-Status")))
            expect_eq(len(o.requests()), 2, "%s: origin requests" % pre)
            r = get(c.port, p, "a.test")
            expect(is_hit(r), "%s: stored once revalidated: %r" % (pre, r.header("Cache-Status")))


if __name__ == "__main__":
    harness.main()
