#!/usr/bin/env python3
"""End-to-end tests of PUSH, PURGE and their ip_allow rules (issue 8).

A pushed object is a whole HTTP response in the request body; a GET then
must be served from the cache with no origin request (the origin's request
log proves it).  Every refused PUSH/PURGE must leave the cache as it was:
checked by a GET (a hit on the previous version) or a PURGE (404 when
nothing was stored).
"""

import os
import subprocess
import threading
import time

import harness
from harness import (Cistern, Collector, Origin, cache_stats, expect,
                     expect_body, expect_eq, is_hit, seeded)

HOST = "p.test"
PUSH_ON = {"proxy.config.http.push_method_enabled": 1}
SCRIPT = os.path.join(harness.srcdir(), "scripts", "push.sh")


def remap_for(o):
    return ["map http://%s/ http://%s/" % (HOST, o.authority)]


def request(port, method, path, body=None, headers=(), host=HOST, src=None,
            timeout=30.0):
    return harness.one_request(port, method, path, body, headers, host, src,
                               timeout)


def req_ok(port, method, path, **kw):
    r = request(port, method, path, **kw)
    expect(r is not None, "%s %s: no complete response" % (method, path))
    return r


def response_bytes(body, status=200, cc="max-age=600", extra=(),
                   length=True):
    h = ["HTTP/1.1 %d X" % status]
    if cc:
        h.append("Cache-Control: %s" % cc)
    if length:
        h.append("Content-Length: %d" % len(body))
    h += list(extra)
    return ("\r\n".join(h) + "\r\n\r\n").encode("latin-1") + body


def push(port, path, body, **kw):
    return req_ok(port, "PUSH", path, body=response_bytes(body), **kw)


def get(port, path, **kw):
    return req_ok(port, "GET", path, **kw)


# ---------------------------------------------------------------------------

def test_push_then_get_no_origin():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        a, b = seeded("pa", 30000), seeded("pb", 12345)
        r = push(c.port, "/obj", a)
        expect_eq(r.status, 201, "first PUSH status (new)")
        for i in range(6):      # new connections: both workers
            g = get(c.port, "/obj")
            expect_eq(g.status, 200, "GET status")
            expect(is_hit(g), "GET after PUSH: Cache-Status %r"
                   % g.header("Cache-Status"))
            expect_body(g.body, a, "GET body after PUSH")
        r = push(c.port, "/obj", b)
        expect_eq(r.status, 200, "second PUSH status (replaced)")
        g = get(c.port, "/obj")
        expect(is_hit(g), "GET after the replacing PUSH: not a hit")
        expect_body(g.body, b, "GET body after the replacing PUSH")
        r = push(c.port, "/obj2", b)
        expect_eq(r.status, 201, "PUSH to another URL (new)")
        # query strings are part of the key
        r = push(c.port, "/obj?v=1", a)
        expect_eq(r.status, 201, "PUSH /obj?v=1 (new)")
        expect_body(get(c.port, "/obj?v=1").body, a, "/obj?v=1")
        expect_body(get(c.port, "/obj").body, b, "/obj unchanged")
        expect_eq(o.requests(), [], "origin requests (PUSH and hits must "
                  "never reach it)")


def test_purge():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        expect_eq(push(c.port, "/pg", seeded("pg", 5000)).status, 201,
                  "PUSH")
        r = req_ok(c.port, "PURGE", "/pg")
        expect_eq(r.status, 200, "first PURGE")
        r = req_ok(c.port, "PURGE", "/pg")
        expect_eq(r.status, 404, "second PURGE")
        r = req_ok(c.port, "PURGE", "/never-stored")
        expect_eq(r.status, 404, "PURGE of a URL never stored")
        expect_eq(o.requests(), [], "PURGE reached the origin")
        g = get(c.port, "/pg")
        expect(not is_hit(g), "GET after PURGE was a hit")
        expect(g.header("X-Origin-Seq") is not None,
               "GET after PURGE did not reach the origin")
        expect_eq(len(o.requests()), 1, "origin requests after PURGE+GET")
        # an object filled from the origin is purged the same way
        p = "/seed/f/bytes/100/headers?Cache-Control=max-age%3D60"
        get(c.port, p)
        expect(is_hit(get(c.port, p)), "origin object not stored")
        expect_eq(req_ok(c.port, "PURGE", p).status, 200, "PURGE filled")
        expect(not is_hit(get(c.port, p)), "hit after PURGE")


def test_purge_reaches_origin_in_every_worker():
    with Origin() as o, Cistern(
            storage=["cache 64M"], remap=remap_for(o), workers=2,
            records=dict(PUSH_ON, **{
                "proxy.config.cistern.debug_headers": 1})) as c:
        pushed = seeded("pw", 4000)
        # The origin answers this URL uncacheably, so every GET after the
        # PURGE must reach it: no worker may still serve the pushed bytes.
        o.script("/pw", [{"status": 200, "body": b"origin",
                          "headers": [["Cache-Control", "no-store"]]}])
        expect_eq(push(c.port, "/pw", pushed).status, 201, "PUSH")
        seen_hit = set()
        for _ in range(200):
            g = get(c.port, "/pw")
            expect_body(g.body, pushed, "before PURGE")
            seen_hit.add(g.header("X-Cistern-Worker", "?").split(";")[0])
            if len(seen_hit) >= 2:
                break
        expect(len(seen_hit) >= 2, "the pushed object was served by only "
               "%s" % seen_hit)
        expect_eq(req_ok(c.port, "PURGE", "/pw").status, 200, "PURGE")
        seen = set()
        n = 0
        for _ in range(200):
            g = get(c.port, "/pw")
            n += 1
            expect_body(g.body, b"origin", "GET after PURGE (worker %s)"
                        % g.header("X-Cistern-Worker"))
            expect(not is_hit(g), "hit after PURGE")
            seen.add(g.header("X-Cistern-Worker", "?").split(";")[0])
            if len(seen) >= 2:
                break
        expect(len(seen) >= 2, "only worker(s) %s answered" % seen)
        expect_eq(len(o.requests()), n, "origin requests after PURGE")


def test_forbidden_from_other_address():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        a = seeded("fa", 3000)
        expect_eq(push(c.port, "/f", a).status, 201, "PUSH from 127.0.0.1")
        try:
            r = push(c.port, "/f", seeded("fb", 100), src="127.0.0.2")
        except OSError as e:
            raise harness.SkipTest("cannot bind 127.0.0.2: %s" % e)
        expect_eq(r.status, 403, "PUSH from 127.0.0.2")
        r = push(c.port, "/f-new", seeded("fb", 100), src="127.0.0.2")
        expect_eq(r.status, 403, "PUSH of a new URL from 127.0.0.2")
        r = req_ok(c.port, "PURGE", "/f", src="127.0.0.2")
        expect_eq(r.status, 403, "PURGE from 127.0.0.2")
        r = req_ok(c.port, "DELETE", "/f", src="127.0.0.2")
        expect_eq(r.status, 403, "DELETE from 127.0.0.2")
        # nothing changed
        g = get(c.port, "/f", src="127.0.0.2")
        expect_eq(g.status, 200, "GET from 127.0.0.2 is allowed")
        expect(is_hit(g), "GET after the denied requests: not a hit")
        expect_body(g.body, a, "GET body after the denied requests")
        expect_eq(req_ok(c.port, "PURGE", "/f-new").status, 404,
                  "the denied PUSH stored something")
        expect_eq(o.requests(), [], "denied requests reached the origin")


def test_push_disabled():
    with Origin() as o, Cistern(storage=["cache 64M"],
                                remap=remap_for(o)) as c:
        r = push(c.port, "/d", seeded("d", 100))
        expect_eq(r.status, 403, "PUSH with push_method_enabled 0")
        g = get(c.port, "/d")
        expect(not is_hit(g), "a refused PUSH was stored")
        expect_eq(len(o.requests()), 1, "origin requests (only the GET)")


def _bad_cases():
    body = seeded("bad", 1000)
    head = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
    return [
        ("not a response", b"hello world, this is not HTTP\r\n\r\n"),
        ("a request, not a response", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("only a status line", b"HTTP/1.1 200 OK\r\n"),
        ("head without the blank line",
         head + b"Content-Length: 1000\r\n"),
        ("truncated body", head + b"Content-Length: 1000\r\n\r\n"
         + body[:500]),
        ("Content-Length bigger than what follows",
         head + b"Content-Length: 1001\r\n\r\n" + body),
        ("Content-Length smaller than what follows",
         head + b"Content-Length: 999\r\n\r\n" + body),
        ("Content-Length with Transfer-Encoding",
         head + b"Content-Length: 1000\r\nTransfer-Encoding: chunked\r\n\r\n"
         + b"3e8\r\n" + body + b"\r\n0\r\n\r\n"),
        ("two different Content-Lengths",
         head + b"Content-Length: 1000\r\nContent-Length: 999\r\n\r\n"
         + body),
        ("bad chunk size", head + b"Transfer-Encoding: chunked\r\n\r\n"
         + b"zz\r\n" + body + b"\r\n0\r\n\r\n"),
        ("chunked without the last chunk",
         head + b"Transfer-Encoding: chunked\r\n\r\n3e8\r\n" + body
         + b"\r\n"),
        ("obs-fold", b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
         b"X-A: a\r\n  folded\r\nContent-Length: 1000\r\n\r\n" + body),
        ("interim status 100", b"HTTP/1.1 100 Continue\r\n\r\n"),
        ("no-store", b"HTTP/1.1 200 OK\r\nCache-Control: no-store, "
         b"max-age=600\r\nContent-Length: 1000\r\n\r\n" + body),
        ("private", b"HTTP/1.1 200 OK\r\nCache-Control: private, "
         b"max-age=600\r\nContent-Length: 1000\r\n\r\n" + body),
        ("no freshness at all", b"HTTP/1.1 200 OK\r\nContent-Length: 1000"
         b"\r\n\r\n" + body),
        ("max-age=0", b"HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\n"
         b"Content-Length: 1000\r\n\r\n" + body),
        ("over max_doc_size (100000)",
         head + b"Content-Length: 150000\r\n\r\n" + seeded("big", 150000)),
        ("chunked over max_doc_size (100000)",
         head + b"Transfer-Encoding: chunked\r\n\r\n"
         + b"".join(b"%x\r\n%s\r\n" % (10000, seeded("bc%d" % i, 10000))
                    for i in range(15)) + b"0\r\n\r\n"),
    ]


def test_bad_push_400_changes_nothing():
    with Origin() as o, Cistern(
            storage=["cache 64M"], remap=remap_for(o),
            records=dict(PUSH_ON, **{
                "proxy.config.cache.max_doc_size": 100000})) as c, \
            Collector() as col:
        for i, (name, msg) in enumerate(_bad_cases()):
            with col.case(name):
                prev = seeded("prev%d" % i, 777)
                expect_eq(push(c.port, "/b%d" % i, prev).status, 201,
                          "setup PUSH")
                r = req_ok(c.port, "PUSH", "/b%d" % i, body=msg)
                expect_eq(r.status, 400, "PUSH over an existing object")
                expect(len(r.body.strip()) > 0, "400 without a reason")
                g = get(c.port, "/b%d" % i)
                expect(is_hit(g), "the old object is gone")
                expect_body(g.body, prev, "GET after the refused PUSH")
                r = req_ok(c.port, "PUSH", "/n%d" % i, body=msg)
                expect_eq(r.status, 400, "PUSH of a new URL")
                expect_eq(req_ok(c.port, "PURGE", "/n%d" % i).status, 404,
                          "the refused PUSH stored something")
        with col.case("PUSH without a body"):
            r = req_ok(c.port, "PUSH", "/nobody", body=b"")
            expect_eq(r.status, 400, "empty PUSH")
        with col.case("control: a good PUSH still works"):
            r = req_ok(c.port, "PUSH", "/good",
                       body=response_bytes(seeded("good", 99000)))
            expect_eq(r.status, 201, "good PUSH")
        with col.case("control: chunked PUSH stored"):
            msg = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n"
                   + b"".join(b"%x\r\n%s\r\n" % (1000, seeded("ck%d" % i,
                                                              1000))
                              for i in range(5)) + b"0\r\n\r\n")
            r = req_ok(c.port, "PUSH", "/chunked", body=msg)
            expect_eq(r.status, 201, "chunked PUSH")
            g = get(c.port, "/chunked")
            expect_body(g.body, b"".join(seeded("ck%d" % i, 1000)
                                         for i in range(5)), "chunked body")
            expect_eq(g.header("Content-Length"), "5000", "Content-Length")
        expect_eq(o.requests(), [], "origin requests")


def test_push_required_headers_2():
    with Cistern(storage=["cache 64M"],
                 remap=["map http://%s/ http://127.0.0.1:9/" % HOST],
                 records=dict(PUSH_ON, **{
                     "proxy.config.http.cache.required_headers": 2})) as c:
        lm = b"Last-Modified: Mon, 01 Jan 2001 00:00:00 GMT\r\n"
        r = req_ok(c.port, "PUSH", "/lm", body=b"HTTP/1.1 200 OK\r\n" + lm
                   + b"Content-Length: 3\r\n\r\nabc")
        expect_eq(r.status, 400, "Last-Modified only, required_headers 2")
        expect_eq(req_ok(c.port, "PURGE", "/lm").status, 404,
                  "refused PUSH stored something")
        r = req_ok(c.port, "PUSH", "/ma", body=b"HTTP/1.1 200 OK\r\n" + lm
                   + b"Cache-Control: max-age=60\r\nContent-Length: 3\r\n"
                   b"\r\nabc")
        expect_eq(r.status, 201, "with max-age, required_headers 2")
        exp = time.strftime("%a, %d %b %Y %H:%M:%S GMT",
                            time.gmtime(time.time() + 3600)).encode()
        r = req_ok(c.port, "PUSH", "/ex", body=b"HTTP/1.1 200 OK\r\n"
                   b"Expires: " + exp + b"\r\nContent-Length: 3\r\n\r\nabc")
        expect_eq(r.status, 201, "with Expires, required_headers 2")


def test_push_10mb():
    with Origin() as o, Cistern(storage=["cache 256M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        n = 10 * 1000 * 1000
        big = seeded("ten", n)
        r = req_ok(c.port, "PUSH", "/ten", body=response_bytes(big),
                   timeout=60)
        expect_eq(r.status, 201, "10 MB PUSH status (answer %r)"
                  % r.body[:200])
        g = get(c.port, "/ten", timeout=60)
        expect(is_hit(g), "GET after the 10 MB PUSH: %r"
               % g.header("Cache-Status"))
        expect_body(g.body, big, "10 MB body")
        expect_eq(o.requests(), [], "origin requests")


def test_push_segment_limit_boundary():
    """What the store can hold: objects span segments (a 64M store has 15
    segments of 4 MiB, cache/FORMAT.md), up to max_doc_size, by default a
    quarter of the ring (15 MiB here): a 5 MiB object (over a segment) is
    stored, one over the quarter is refused with 400 and nothing changes."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        n = 5 * 1024 * 1024
        big = seeded("five", n)
        r = req_ok(c.port, "PUSH", "/five", body=response_bytes(big),
                   timeout=60)
        expect_eq(r.status, 201, "5 MiB PUSH (over a segment)")
        g = get(c.port, "/five", timeout=60)
        expect_body(g.body, big, "5 MiB body")
        r = req_ok(c.port, "PUSH", "/five",
                   body=response_bytes(seeded("sixteen", 16 << 20)), timeout=60)
        expect_eq(r.status, 400, "16 MiB PUSH (over a quarter of the store)")
        g = get(c.port, "/five", timeout=60)
        expect_body(g.body, big, "after the refused 16 MiB PUSH")
        expect_eq(o.requests(), [], "origin requests")


def test_push_unmapped_404():
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON) as c:
        g = req_ok(c.port, "GET", "/u", host="unmapped.test")
        r = req_ok(c.port, "PUSH", "/u", host="unmapped.test",
                   body=response_bytes(b"abc"))
        expect_eq(r.status, 404, "PUSH to an unmapped host")
        expect_eq(r.status, g.status, "PUSH status equals GET status")
        r = req_ok(c.port, "PURGE", "/u", host="unmapped.test")
        expect_eq(r.status, 404, "PURGE of an unmapped host")
        expect_eq(o.requests(), [], "origin requests")


@harness.timeout(100)
def test_push_purge_race_never_mixed():
    """Readers GET one URL continuously while writers PUSH versions A and
    B (different sizes) and PURGE it.  Every complete GET body must equal
    exactly A, B or the origin's body: never a mix, never partial."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON, workers=2) as c:
        va, vb = seeded("ra", 200000), seeded("rb", 70001)
        origin_body = seeded("ro", 150000)
        o.script("/race", [{"status": 200, "body": origin_body,
                            "headers": [["Cache-Control", "max-age=600"]]}])
        allowed = {va: "A", vb: "B", origin_body: "origin"}
        stop = threading.Event()
        errors, counts, wstat = [], {}, {}
        lock = threading.Lock()

        def reader():
            while not stop.is_set():
                try:
                    r = request(c.port, "GET", "/race", timeout=10)
                except OSError as e:
                    with lock:
                        errors.append("GET: %s" % e)
                    continue
                if r is None:
                    with lock:
                        errors.append("GET: incomplete response")
                    continue
                v = allowed.get(r.body)
                with lock:
                    if r.status != 200 or v is None:
                        errors.append("GET: status %d, %d-byte body that is "
                                      "none of the versions (%s)" % (
                                          r.status, len(r.body),
                                          r.header("Cache-Status")))
                    else:
                        counts[v] = counts.get(v, 0) + 1

        def writer(k):
            i = 0
            while not stop.is_set():
                i += 1
                if (i + k) % 3 == 0:
                    m, body = "PURGE", None
                else:
                    m = "PUSH"
                    body = response_bytes(va if (i + k) % 2 else vb)
                try:
                    r = request(c.port, m, "/race", body=body, timeout=10)
                except OSError as e:
                    with lock:
                        errors.append("%s: %s" % (m, e))
                    continue
                with lock:
                    st = r.status if r else None
                    wstat[(m, st)] = wstat.get((m, st), 0) + 1
                    if r is None or (m == "PUSH" and st not in (200, 201)) \
                            or (m == "PURGE" and st not in (200, 404)):
                        errors.append("%s: status %s" % (m, st))
        ts = [threading.Thread(target=reader) for _ in range(10)] + \
             [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        time.sleep(12)
        stop.set()
        for t in ts:
            t.join(20)
        expect(not errors, "%d errors, e.g.: %s" % (len(errors),
                                                    "; ".join(errors[:5])))
        print("    race: GETs %s; writes %s" % (counts, wstat))
        expect(counts.get("A", 0) > 0 and counts.get("B", 0) > 0,
               "readers never saw both pushed versions: %s" % counts)
        expect(sum(counts.values()) > 200, "too few GETs: %s" % counts)


def test_push_script_and_ab():
    if not os.access(SCRIPT, os.X_OK):
        harness.fail("%s is missing or not executable" % SCRIPT)
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                records=PUSH_ON, workers=2) as c:
        def run(*args):
            return subprocess.run([SCRIPT] + list(args),
                                  stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, timeout=60)
        p = run("--port", str(c.port), "-H", HOST, "--bytes", "65536",
                "/obj/64k")
        out = p.stdout.decode()
        expect_eq(p.returncode, 0, "push.sh exit status (stdout %r, stderr "
                  "%r)" % (out, p.stderr.decode()))
        expect(out.startswith("201"), "push.sh output %r" % out)
        p = run("--url", "http://127.0.0.1:%d" % c.port, "-H", HOST,
                "--bytes", "65536", "/obj/64k")
        expect(p.stdout.decode().startswith("200"),
               "second push.sh output %r" % p.stdout.decode())
        g = get(c.port, "/obj/64k")
        expect(is_hit(g), "GET after push.sh: %r" % g.header("Cache-Status"))
        expect_body(g.body, harness.pattern(65536), "pushed 64 KiB body")
        expect_eq(g.header("Cache-Control"), "max-age=86400",
                  "Cache-Control")
        # --file, --content-type, --max-age
        fpath = os.path.join(c.tmpdir, "f.bin")
        with open(fpath, "wb") as f:
            f.write(seeded("file", 5000))
        p = run("--port", str(c.port), "-H", HOST, "--file", fpath,
                "--content-type", "image/png", "--max-age", "120", "/f")
        expect_eq(p.returncode, 0, "push.sh --file (%r)" % p.stdout)
        g = get(c.port, "/f")
        expect_body(g.body, seeded("file", 5000), "--file body")
        expect_eq(g.header("Content-Type"), "image/png", "Content-Type")
        expect_eq(g.header("Cache-Control"), "max-age=120", "Cache-Control")
        # refused: exit 1 and the status printed
        p = run("--port", str(c.port), "-H", "unmapped.test", "--bytes", "1",
                "/x")
        expect(p.returncode == 1 and p.stdout.decode().startswith("404"),
               "push.sh to an unmapped host: rc %d, %r"
               % (p.returncode, p.stdout))
        p = run("--bytes", "1")
        expect_eq(p.returncode, 2, "usage error exit status")
        # the ATS benchmark workflow
        s0 = cache_stats(c.port)
        a = harness.ab(["-k", "-c", "40", "-n", "20000", "-H",
                        "Host: " + HOST,
                        "http://127.0.0.1:%d/obj/64k" % c.port])
        s1 = cache_stats(c.port)
        print("    ab -k -c 40 -n 20000 on a pushed 64 KiB object: %s req/s"
              % a.rps)
        expect_eq(a.complete, 20000, "ab complete (%s)" % a.output[-500:])
        expect_eq(a.failed, 0, "ab failed requests")
        expect_eq(a.non2xx, 0, "ab non-2xx")
        expect_eq(s1["proxy.process.cache.hits"]
                  - s0["proxy.process.cache.hits"], 20000, "cache hits")
        expect_eq(o.requests(), [], "origin requests")


if __name__ == "__main__":
    harness.main()
