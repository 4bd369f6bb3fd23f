#!/usr/bin/env python3
"""t/test_parent.py: parent.config (issue 20): origin pools and a cache tier.

Origins are t/origin.py processes on 127.0.0.1, each on its own port;
parents of a tier are Cistern instances.  What is checked is what reached
each origin (its request log) and what the daemon says (/_stats, the
Cache-Status detail, the access log).
"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

import harness
from harness import Cistern, Origin, ab, expect, expect_eq, one_request, \
    wait_for


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(port, path, host="pool.test", headers=()):
    r = one_request(port, "GET", path, host=host, headers=headers)
    expect(r is not None, "no response for %s" % path)
    return r


def hdr(r, name):
    for k, v in r.headers:
        if k.lower() == name.lower():
            return v
    return None


def parent_of(r):
    """The parent named in our Cache-Status (detail="... parent=h:p")."""
    for k, v in r.headers:
        if k.lower() == "cache-status" and "parent=" in v:
            return re.search(r'parent=([^";]+)', v).group(1)
    return None


def pstats(port):
    r = one_request(port, "GET", "/_stats")
    expect(r is not None and r.status == 200, "/_stats")
    g = json.loads(r.body.decode())["global"]
    out = {}
    for k, v in g.items():
        m = re.match(r"proxy\.process\.cistern\.parent\.(.+)\.(requests|failures|"
                     r"marked_down|state)$", k)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = v
    return out


def origin_paths(o):
    return [r["path"] for r in o.requests()]


class FixedOrigin:
    """t/origin.py on a given port (to bring a killed origin back)."""

    def __init__(self, port):
        self.tmp = tempfile.mkdtemp(prefix="cistern-origin-")
        pf = os.path.join(self.tmp, "port")
        self.proc = subprocess.Popen(
            [sys.executable, "-B", os.path.join(harness.HERE, "origin.py"),
             "--port", str(port), "--port-file", pf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        self.port = port
        wait_for(lambda: os.path.exists(pf), 10, what="origin on %d" % port)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


POOL_RECORDS = {"proxy.config.http.cache.http": 0}


def test_round_robin_strict_spreads():
    with Origin() as o1, Origin() as o2:
        pc = ('dest_domain=pool.test parent="127.0.0.1:%d;127.0.0.1:%d" '
              'round_robin=strict parent_is_proxy=false\n' % (o1.port, o2.port))
        with Cistern(records=dict(POOL_RECORDS,
                                  **{"proxy.config.cistern.access_log_format": "json"}),
                     remap=["map http://pool.test/ http://pool.test/"],
                     files={"parent.config": pc}) as c:
            seen = []
            for i in range(20):
                r = get(c.port, "/rr/%d" % i)
                expect_eq(r.status, 200, "status")
                seen.append(parent_of(r))
            n1, n2 = len(o1.requests()), len(o2.requests())
            expect_eq((n1, n2), (10, 10), "strict rotation, requests per origin")
            expect_eq(set(seen), {"127.0.0.1:%d" % o1.port, "127.0.0.1:%d" % o2.port},
                      "parents in Cache-Status")
            # origin form with the origin's Host (the parents are origins)
            r0 = o1.requests()[0]
            expect(r0["target"].startswith("/rr/"), "origin form: %r" % r0["target"])
            expect_eq(dict((k.lower(), v) for k, v in r0["headers"])["host"],
                      "pool.test", "Host")
            st = pstats(c.port)
            expect_eq(st["127.0.0.1:%d" % o1.port]["requests"], "10", "stats requests")
            expect_eq(st["127.0.0.1:%d" % o1.port]["state"], "up", "stats state")
            log = wait_for(lambda: (lambda t: t if t.count('"parent"') >= 20 else None)(
                open(os.path.join(c.log_dir, "access.log")).read()), 5,
                what="20 access-log lines with a parent")
            expect('"parent":"127.0.0.1:%d"' % o2.port in log, "parent in access log")
            m = one_request(c.port, "GET", "/_metrics")
            expect('cistern_parent_requests_total{parent="127.0.0.1:%d"} 10' % o2.port
                   in m.body.decode(), "metrics:\n" + m.body.decode())


@harness.timeout(240)
def test_kill_origin_under_ab():
    with Origin() as o1, Origin() as o2:
        p2 = o2.port
        pc = ('dest_domain=pool.test parent="127.0.0.1:%d;127.0.0.1:%d" '
              'round_robin=strict parent_is_proxy=false\n' % (o1.port, p2))
        rec = dict(POOL_RECORDS, **{
            "proxy.config.http.parent_proxy.retry_time": 4,
            "proxy.config.http.parent_proxy.fail_threshold": 2})
        with Cistern(records=rec, remap=["map http://pool.test/ http://pool.test/"],
                     files={"parent.config": pc}) as c:
            res = {}
            t = threading.Thread(target=lambda: res.update(r=ab(
                ["-n", "2000", "-c", "10", "-k", "-H", "Host: pool.test",
                 c.url("/ab")])))
            t.start()
            wait_for(lambda: len(o2.requests()) > 50, 30, what="traffic on o2")
            o2.proc.kill()              # mid-ab, without a word
            o2.proc.wait()
            t.join(200)
            r = res["r"]
            print("ab: complete %s failed %s non-2xx %s" % (r.complete, r.failed, r.non2xx))
            expect_eq(r.complete, 2000, "complete requests\n" + r.output)
            expect_eq(r.failed, 0, "failed requests while an origin was killed")
            expect_eq(r.non2xx, 0, "non-2xx responses")
            st = pstats(c.port)["127.0.0.1:%d" % p2]
            print("stats of the killed origin: %r" % st)
            expect_eq(st["state"], "down", "killed origin's state")
            expect(int(st["marked_down"]) >= 1, "marked down: %r" % st)
            c.expect_log(r"parent 127\.0\.0\.1:%d marked down" % p2)
            # back up after retry_time, probed by live traffic
            back = FixedOrigin(p2)
            try:
                time.sleep(4.5)
                for i in range(6):
                    expect_eq(get(c.port, "/after/%d" % i).status, 200, "status")
                st = pstats(c.port)["127.0.0.1:%d" % p2]
                expect_eq(st["state"], "up", "state after retry_time")
            finally:
                back.stop()


def _tier(origin, n):
    """n parent Cisterns caching o.test from origin."""
    out = []
    try:
        for _ in range(n):
            out.append(Cistern(storage=["cache 32M"],
                               remap=["map http://o.test/ http://%s/" % origin.authority]))
    except BaseException:
        for p in out:
            p.stop(raise_on_problems=False)
        raise
    return out


@harness.timeout(300)
def test_tier_consistent_hash():
    with Origin() as o:
        parents = _tier(o, 3)
        try:
            names = ["127.0.0.1:%d" % p.port for p in parents]
            pc = ('dest_domain=o.test parent="%s" round_robin=consistent_hash '
                  'go_direct=false\n' % ";".join(names))
            with Cistern(records={"proxy.config.http.cache.http": 0},
                         remap=["map http://o.test/ http://o.test/"],
                         files={"parent.config": pc}) as child:
                urls = ["/obj/%d/headers?Cache-Control=max-age%%3D600" % i
                        for i in range(90)]
                owner = {}
                for u in urls:
                    r = get(child.port, u, host="o.test")
                    expect_eq(r.status, 200, "status " + u)
                    owner[u] = parent_of(r)
                for u in urls:      # again: the same parent, which has it
                    r = get(child.port, u, host="o.test")
                    expect_eq(parent_of(r), owner[u], "owner of " + u)
                paths = origin_paths(o)
                expect_eq(len(paths), 90, "origin requests (each URL once)")
                expect_eq(len(set(paths)), 90, "distinct URLs at the origin")
                per = {n: sum(1 for u in urls if owner[u] == n) for n in names}
                print("keys per parent: %r" % per)
                expect(min(per.values()) >= 15, "balance: %r" % per)
                # the absolute form reached the parents
                # one parent leaves: only its keys move
                gone = names[1]
                parents[1].stop()
                o.reset()
                moved = 0
                for u in urls:
                    r = get(child.port, u, host="o.test")
                    expect_eq(r.status, 200, "status after a parent left " + u)
                    p = parent_of(r)
                    if owner[u] == gone:
                        moved += 1
                        expect(p != gone, "moved key still on the stopped parent")
                    else:
                        expect_eq(p, owner[u], "a key that was not the stopped "
                                  "parent's moved: " + u)
                refetched = len(origin_paths(o))
                print("parent %s stopped: %d of 90 keys moved; the origin saw %d "
                      "requests" % (gone, moved, refetched))
                expect_eq(moved, per[gone], "keys moved")
                expect_eq(refetched, per[gone], "origin requests after the move")
        finally:
            for i, p in enumerate(parents):
                if i != 1:
                    p.stop()


@harness.timeout(240)
def test_reload_changes_parents_under_ab():
    with Origin() as o1, Origin() as o2:
        pc1 = ('dest_domain=pool.test parent="127.0.0.1:%d" parent_is_proxy=false\n'
               % o1.port)
        pc2 = ('dest_domain=pool.test parent="127.0.0.1:%d" parent_is_proxy=false\n'
               % o2.port)
        with Cistern(records=POOL_RECORDS, remap=["map http://pool.test/ http://pool.test/"],
                     files={"parent.config": pc1}) as c:
            res = {}
            t = threading.Thread(target=lambda: res.update(r=ab(
                ["-n", "3000", "-c", "8", "-k", "-H", "Host: pool.test", c.url("/r")])))
            t.start()
            wait_for(lambda: len(o1.requests()) > 100, 30, what="traffic on o1")
            c.write_file("parent.config", pc2)
            c.reload(wait_log=r"reload|generation", timeout=20)
            t.join(200)
            r = res["r"]
            print("ab across the reload: complete %s failed %s non-2xx %s; o1 %d o2 %d"
                  % (r.complete, r.failed, r.non2xx, len(o1.requests()),
                     len(o2.requests())))
            expect_eq(r.failed, 0, "failed requests across the reload")
            expect_eq(r.non2xx, 0, "non-2xx across the reload")
            o2.reset()
            expect_eq(get(c.port, "/after").status, 200, "after reload")
            expect_eq(len(o2.requests()), 1, "the new parent list applies")


def test_go_direct_and_secondary():
    dead = free_port()
    with Origin() as o:
        pc = ('dest_ip=127.0.0.1 port=%d parent="127.0.0.1:%d" go_direct=true\n'
              'dest_domain=nd.test parent="127.0.0.1:%d" go_direct=false\n'
              'dest_domain=sec.test parent="127.0.0.1:%d" secondary_parent="%s" '
              'round_robin=consistent_hash parent_is_proxy=false\n'
              % (o.port, dead, dead, dead, o.authority))
        with Cistern(records=POOL_RECORDS,
                     remap=["map http://gd.test/ http://%s/" % o.authority,
                            "map http://nd.test/ http://nd.test/",
                            "map http://sec.test/ http://sec.test/"],
                     files={"parent.config": pc}) as c:
            c.expect_log(r"connect to origin 127\.0\.0\.1:%d" % dead)
            r = get(c.port, "/direct", host="gd.test")
            expect_eq(r.status, 200, "go_direct=true: the origin answers")
            expect_eq(parent_of(r), None, "no parent in Cache-Status")
            expect_eq(o.requests()[-1]["target"], "/direct", "origin form when direct")
            r = get(c.port, "/x", host="nd.test")
            expect_eq(r.status, 502, "go_direct=false, the one parent dead")
            r = get(c.port, "/s", host="sec.test")
            expect_eq(r.status, 200, "secondary_parent answers")
            expect_eq(parent_of(r), o.authority, "the secondary parent")


def test_unavailable_server_retry_503():
    with Origin() as o1, Origin() as o2:
        o1.script("/u", [{"status": 503, "body": "busy"}])
        o2.script("/u", [{"status": 200, "body": "fine"}])
        pc = ('dest_domain=r.test parent="127.0.0.1:%d;127.0.0.1:%d" '
              'parent_is_proxy=false parent_retry=unavailable_server_retry\n'
              'dest_domain=n.test parent="127.0.0.1:%d;127.0.0.1:%d" '
              'parent_is_proxy=false\n' % (o1.port, o2.port, o1.port, o2.port))
        with Cistern(records=POOL_RECORDS,
                     remap=["map http://r.test/ http://r.test/",
                            "map http://n.test/ http://n.test/"],
                     files={"parent.config": pc}) as c:
            r = get(c.port, "/u", host="r.test")
            expect_eq((r.status, r.body), (200, b"fine"), "503 retried on the next parent")
            expect_eq(len(o1.requests()), 1, "first parent asked once")
            # without parent_retry the 503 is the answer (round_robin=false:
            # the first parent, up again after its success elsewhere? it was
            # counted one failure, below fail_threshold)
            r = get(c.port, "/u", host="n.test")
            expect_eq(r.status, 503, "no parent_retry: the 503 passes")


def test_parent_is_proxy_absolute_form_and_proxy_auth():
    """An origin.py stands in for the parent proxy: it records the request
    line (absolute form) and whether Proxy-Authorization came along."""
    with Origin() as fake_parent:
        pc = 'dest_domain=o.test parent="%s"\n' % fake_parent.authority
        for flag in (0, 1):
            with Cistern(records={"proxy.config.http.cache.http": 0,
                                  "proxy.config.http.forward.proxy_auth_to_parent": flag},
                         remap=["map http://o.test/ http://o.test:8080/"],
                         files={"parent.config": pc}) as c:
                r = get(c.port, "/pa/%d" % flag, host="o.test",
                        headers=[("Proxy-Authorization", "Basic eDp5")])
                expect_eq(r.status, 200, "status")
                q = fake_parent.requests()[-1]
                expect_eq(q["target"], "http://o.test:8080/pa/%d" % flag,
                          "absolute form to a parent proxy")
                hs = dict((k.lower(), v) for k, v in q["headers"])
                expect_eq(hs.get("host"), "o.test:8080", "Host is the origin's")
                expect_eq("proxy-authorization" in hs, bool(flag),
                          "Proxy-Authorization with proxy_auth_to_parent %d" % flag)
                # a POST is not a cache lookup: it bypasses the parent
                # (uncacheable_requests_bypass_parent 1) and goes to o.test,
                # which does not resolve: 502, and the parent saw nothing
                n = len(fake_parent.requests())
                r = one_request(c.port, "POST", "/p", body=b"x", host="o.test")
                expect_eq(len(fake_parent.requests()), n, "POST bypassed the parent")
                c.expect_log(r"cannot resolve origin o\.test|o\.test")


if __name__ == "__main__":
    harness.main()
