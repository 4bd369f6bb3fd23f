#!/usr/bin/env python3
"""t/test_ctl.py: issue 25, what an operator sees.  `cistern ctl` verb by
verb against a running instance (metric get/match, config reload/status,
server drain/undrain, cache lookup/purge, host down/up, --json, the exit
codes, a user without access to the socket refused), /_metrics after
mixed traffic (`promtool check metrics` clean, histogram counts equal to
the requests made, per-rule counters adding up to the totals), and
`ctl top` (one plain frame; the live screen in a tmux pane under a known
ab load, captured and checked for the figures), and the busiest URLs
(`ctl url top`, the URL rows of `ctl top` in tmux, `cache lookup`'s
"hits") under a known load, across a reload and past the table's bound."""
import atexit
import http.client
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Cistern, Origin, curl, expect, expect_eq, wait_for  # noqa: E402

CACHEABLE = "/headers?Cache-Control=max-age%3D300"


_bin_for_others = []


def bin_for_others():
    """The daemon binary copied where any user may run it (the build tree
    may sit under a directory only root can enter, as a CI clone does)."""
    if not _bin_for_others:
        d = tempfile.mkdtemp(prefix="cistern-ctl-bin-")
        atexit.register(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        dst = os.path.join(d, "cistern")
        shutil.copy2(harness.cistern_bin(), dst)
        os.chmod(dst, 0o755)
        _bin_for_others.append(dst)
    return _bin_for_others[0]


def ctl(c, *args, confdir=None, user=None, timeout=40):
    binary = bin_for_others() if user else harness.cistern_bin()
    cmd = [binary, "ctl", "-c", confdir or c.confdir] + list(args)
    if user:
        cmd = ["runuser", "-u", user, "--"] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p


def ctl_json(c, *args):
    p = ctl(c, "--json", *args)
    try:
        return p.returncode, json.loads(p.stdout)
    except ValueError:
        harness.fail("ctl --json %s: not JSON (rc %d): %r %r" % (args, p.returncode, p.stdout, p.stderr))


def remap(o):
    return ["map http://a.test/ http://%s/ @name=site_a" % o.authority,
            "map http://b.test/ http://%s/" % o.authority]


def metrics(c):
    r = curl([c.url("/_metrics")])
    expect_eq(r.status, 200, "/_metrics status")
    return r.body.decode()


def series(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def test_metric_get_and_match():
    with Origin() as o, Cistern(remap=remap(o)) as c:
        for i in range(3):
            curl([c.url("/m/%d" % i), "-H", "Host: a.test"])
        p = ctl(c, "metric", "get", "proxy.process.http.incoming_requests")
        expect_eq(p.returncode, 0, "exit: " + p.stderr)
        name, value = p.stdout.split()
        expect_eq(name, "proxy.process.http.incoming_requests", "name")
        expect_eq(int(value), 3, "requests (3 made)")
        # the Prometheus spelling of a series works too
        p = ctl(c, "metric", "get", 'cistern_rule_requests_total{rule="site_a"}')
        expect_eq((p.returncode, p.stdout.split()[-1]), (0, "3"), "site_a requests: %r" % (p.stdout,))
        p = ctl(c, "metric", "get", "proxy.process.no.such")
        expect_eq(p.returncode, 1, "unknown metric exit")
        expect("no such metric" in p.stderr, "stderr: %r" % p.stderr)
        p = ctl(c, "metric", "match", r"^proxy\.process\.cistern\.rule\.site_a\.")
        expect_eq(p.returncode, 0, "match exit")
        got = dict(l.split() for l in p.stdout.splitlines())
        expect_eq(sorted(got), sorted("proxy.process.cistern.rule.site_a." + s for s in
                                      ("requests", "hits", "misses", "bytes", "errors")), "matched names")
        expect_eq(got["proxy.process.cistern.rule.site_a.misses"], "3", "misses")
        rc, j = ctl_json(c, "metric", "match", r"http\.[0-9]xx_responses")
        expect_eq((rc, j.get("proxy.process.http.2xx_responses")), (0, 3), "json 2xx: %r" % j)
        expect_eq(ctl(c, "metric", "match", "(").returncode, 2, "bad regex exit")
        expect_eq(ctl(c, "metric").returncode, 2, "usage exit")
        expect_eq(ctl(c, "frobnicate", "x").returncode, 2, "unknown verb exit")


def test_unreachable_instance_exit_3():
    d = tempfile.mkdtemp(prefix="cistern-ctl-")
    try:
        harness.write_confdir(os.path.join(d, "conf"), records={"proxy.config.cistern.run_dir": os.path.join(d, "run")})
        p = ctl(None, "config", "status", confdir=os.path.join(d, "conf"))
        expect_eq(p.returncode, 3, "exit without an instance: %r" % p.stderr)
        expect("cannot reach" in p.stderr, "stderr: %r" % p.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@harness.timeout(180)
def test_promtool_histograms_and_rule_sums():
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        made = {"hit": 0, "miss": 0, "other": 0}
        rules = {"site_a": 0, "remap.config:2": 0}
        for i in range(4):                          # 4 cacheable URLs: 1 miss then 3 hits each
            for k in range(4):
                r = curl([c.url(CACHEABLE + "&u=%d" % i), "-H", "Host: a.test"])
                expect_eq(r.status, 200, "status")
                made["miss" if k == 0 else "hit"] += 1
                rules["site_a"] += 1
        for i in range(3):                          # uncacheable misses, 5xx on rule 2
            r = curl([c.url("/status/503/u%d" % i), "-H", "Host: b.test"])
            expect_eq(r.status, 503, "origin 503")
            made["miss"] += 1
            rules["remap.config:2"] += 1
        for i in range(2):                          # no rule: our 404s
            expect_eq(curl([c.url("/x%d" % i), "-H", "Host: none.test"]).status, 404, "404")
            made["other"] += 1
        text = metrics(c)
        if shutil.which("promtool") is None:
            print("SKIP-PART promtool missing (apt-get install prometheus)")
        else:
            p = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                               capture_output=True)
            expect_eq(p.returncode, 0, "promtool check metrics: %s %s" % (p.stdout, p.stderr))
        fams = [l.split()[2] for l in text.splitlines() if l.startswith("# TYPE")]
        helps = [l.split()[2] for l in text.splitlines() if l.startswith("# HELP")]
        expect_eq(fams, helps, "a HELP for every TYPE")
        s = series(text)
        for res, n in made.items():
            for fam in ("cistern_request_duration_seconds", "cistern_request_ttfb_seconds"):
                expect_eq(s['%s_count{result="%s"}' % (fam, res)], n, "%s %s count" % (fam, res))
                expect_eq(s['%s_bucket{result="%s",le="+Inf"}' % (fam, res)], n, "%s %s +Inf" % (fam, res))
        expect_eq(s['cistern_origin_duration_seconds_count{result="miss"}'], made["miss"], "origin count")
        total = sum(s['cistern_request_duration_seconds_count{result="%s"}' % r] for r in made)
        # this scrape is counted as a request, not yet as ended
        expect_eq(total, s["cistern_requests_total"] - 1, "histogram total vs requests")
        for name, n in rules.items():
            expect_eq(s['cistern_rule_requests_total{rule="%s"}' % name], n, "rule %s requests" % name)
        rsum = lambda f, extra="": sum(v for k, v in s.items() if k.startswith(f + "{") and k.endswith(extra + "}"))
        expect_eq(rsum("cistern_rule_requests_total"), sum(rules.values()), "rules add up to the mapped requests")
        expect_eq(rsum("cistern_rule_cache_results_total", ',result="hit"'),
                  s['cistern_request_duration_seconds_count{result="hit"}'], "rule hits = hit count")
        expect_eq(rsum("cistern_rule_cache_results_total", ',result="miss"'),
                  s['cistern_request_duration_seconds_count{result="miss"}'], "rule misses = miss count")
        expect_eq(s['cistern_rule_errors_total{rule="remap.config:2"}'], 3, "rule 2 errors (503s)")
        expect_eq(s['cistern_rule_errors_total{rule="site_a"}'], 0, "site_a errors")
        expect_eq(s['cistern_origin_host_requests_total{host="%s"}' % o.authority], made["miss"],
                  "origin host requests")
        expect(s['cistern_origin_connect_seconds_count{host="%s"}' % o.authority] >= 1, "connects counted")
        expect(s["cistern_cache_objects"] >= 4, "objects: %r" % s["cistern_cache_objects"])


def test_cache_lookup_and_purge():
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        url = "http://a.test" + CACHEABLE
        rc, j = ctl_json(c, "cache", "lookup", url)
        expect_eq((rc, j.get("stored")), (1, False), "before: %r" % j)
        r = curl([c.url(CACHEABLE), "-H", "Host: a.test"])
        body = r.body
        rc, j = ctl_json(c, "cache", "lookup", url)
        expect_eq((rc, j.get("stored")), (0, True), "after a fetch: %r" % j)
        expect_eq(j["size"], len(body), "size")
        expect_eq(j["status"], 200, "status")
        expect_eq(j["rule"], "site_a", "rule")
        expect(j["key"].endswith(CACHEABLE), "key %r" % j["key"])
        expect(0 <= j["age"] <= 5 and 290 <= j["ttl"] <= 300, "age/ttl %r" % j)
        p = ctl(c, "cache", "lookup", url)
        expect("stored true" in p.stdout, "text: %r" % p.stdout)
        seq = len(o.requests())
        p = ctl(c, "cache", "purge", url)
        expect_eq(p.returncode, 0, "purge exit: %r" % p.stderr)
        expect_eq(ctl(c, "cache", "purge", url).returncode, 1, "second purge: nothing there")
        rc, j = ctl_json(c, "cache", "lookup", url)
        expect_eq((rc, j.get("stored")), (1, False), "after purge: %r" % j)
        curl([c.url(CACHEABLE), "-H", "Host: a.test"])
        expect_eq(len(o.requests()), seq + 1, "the origin asked again after the purge")
        rc, j = ctl_json(c, "cache", "lookup", "http://unmapped.test/x")
        expect_eq((rc, j.get("stored")), (1, False), "unmapped: %r" % j)
        expect_eq(ctl(c, "cache", "lookup", "not-a-url").returncode, 1, "bad URL")


def test_config_reload_and_status():
    with Origin() as o, Cistern(remap=remap(o)) as c:
        rc, j = ctl_json(c, "config", "status")
        expect_eq((rc, j["generation"], j["workers_ready"]), (0, 1, 2), "status %r" % j)
        p = ctl(c, "config", "reload")
        expect_eq(p.returncode, 0, "reload: %r %r" % (p.stdout, p.stderr))
        expect("reload ok" in p.stdout, p.stdout)
        rc, j = ctl_json(c, "config", "status")
        expect_eq((j["generation"], j["reloads_ok"], j["last_reload_result"]), (2, 1, "ok"), "%r" % j)
        c.write_file("remap.config", "map http://a.test/ http://%s/ @frob=1\n" % o.authority)
        c.expect_log(r"frob|reload failed")
        p = ctl(c, "config", "reload")
        expect_eq(p.returncode, 1, "bad reload exit: %r" % p.stdout)
        expect(re.search(r"remap\.config:1: .*frob", p.stdout), "file:line error: %r" % p.stdout)
        rc, j = ctl_json(c, "config", "status")
        expect_eq((j["generation"], j["reloads_failed"], j["last_reload_result"]), (2, 1, "failed"), "%r" % j)
        expect("frob" in j["last_reload_failure"], "%r" % j)
        expect_eq(curl([c.url("/still"), "-H", "Host: a.test"]).status, 200, "still serving")


def test_drain_undrain():
    with Origin() as o, Cistern(remap=remap(o)) as c:
        def conn_header():
            r = curl([c.url("/d"), "-H", "Host: a.test", "--http1.1"])
            expect_eq(r.status, 200, "status")
            return (r.header("Connection") or "").lower()
        expect_eq(conn_header(), "", "keep-alive before")
        p = ctl(c, "server", "drain")
        expect_eq((p.returncode, p.stdout.strip()), (0, "draining true"), "drain")
        expect_eq(conn_header(), "close", "Connection while drained")
        expect_eq(ctl(c, "metric", "get", "proxy.node.config.draining").stdout.split()[-1], "1", "gauge")
        # still accepting: drained is not stopped
        expect_eq(curl([c.url("/d2"), "-H", "Host: a.test"]).status, 200, "served while drained")
        p = ctl(c, "server", "undrain")
        expect_eq((p.returncode, p.stdout.strip()), (0, "draining false"), "undrain")
        expect_eq(conn_header(), "", "keep-alive after undrain")
        expect_eq(ctl(c, "metric", "get", "proxy.node.config.draining").stdout.split()[-1], "0", "gauge")


def test_host_down_up():
    with Origin() as o1, Origin() as o2:
        pc = ('dest_domain=pool.test parent="127.0.0.1:%d;127.0.0.1:%d" '
              'round_robin=strict parent_is_proxy=false go_direct=false\n' % (o1.port, o2.port))
        with Cistern(records={"proxy.config.http.cache.http": 0},
                     remap=["map http://pool.test/ http://pool.test/"],
                     files={"parent.config": pc}) as c:
            for i in range(4):
                expect_eq(curl([c.url("/p/%d" % i), "-H", "Host: pool.test"]).status, 200, "status")
            name = "127.0.0.1:%d" % o1.port
            p = ctl(c, "host", "down", name)
            expect_eq((p.returncode, p.stdout.strip()), (0, name + " down"), "host down")
            n1, n2 = len(o1.requests()), len(o2.requests())
            for i in range(6):
                expect_eq(curl([c.url("/q/%d" % i), "-H", "Host: pool.test"]).status, 200, "status")
            expect_eq((len(o1.requests()) - n1, len(o2.requests()) - n2), (0, 6), "all to the other")
            st = ctl(c, "metric", "get", "proxy.process.cistern.parent.%s.state" % name)
            expect_eq(st.stdout.split()[-1], "down", "state")
            p = ctl(c, "host", "up", name)
            expect_eq(p.returncode, 0, "host up")
            for i in range(6):
                curl([c.url("/r/%d" % i), "-H", "Host: pool.test"])
            expect(len(o1.requests()) - n1 >= 2, "back in rotation")
            expect_eq(ctl(c, "host", "down", "127.0.0.9:1").returncode, 1, "unknown host")


def test_refused_user():
    if os.geteuid() != 0:
        raise harness.SkipTest("needs root (runuser -u nobody)")
    if shutil.which("runuser") is None:
        raise harness.SkipTest("no runuser")
    with Origin() as o, Cistern(remap=remap(o)) as c:
        sock = os.path.join(c.run_dir, "cistern.sock")
        st = os.stat(sock)
        expect_eq((stat.S_IMODE(st.st_mode), st.st_uid), (0o600, 0), "socket mode and owner")
        # let nobody reach the socket's directory and read the config: only
        # the socket's own permission stands in the way
        d = c.run_dir
        while d != "/":
            os.chmod(d, os.stat(d).st_mode | 0o005)
            d = os.path.dirname(d)
        for f in os.listdir(c.confdir):
            os.chmod(os.path.join(c.confdir, f), 0o644)
        os.chmod(c.confdir, 0o755)
        p = ctl(c, "metric", "get", "proxy.process.http.incoming_requests", user="nobody")
        expect_eq(p.returncode, 3, "nobody: %r %r" % (p.stdout, p.stderr))
        expect("Permission denied" in p.stderr, "stderr: %r" % p.stderr)
        expect_eq(ctl(c, "server", "drain", user="nobody").returncode, 3, "nobody cannot drain")
        expect_eq(ctl(c, "metric", "get", "proxy.node.config.draining").stdout.split()[-1], "0", "not drained")
        expect_eq(ctl(c, "config", "status").returncode, 0, "root can")


def test_top_one_plain_frame():
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        for i in range(3):
            curl([c.url(CACHEABLE), "-H", "Host: a.test"])
        p = ctl(c, "top", "-n", "1")
        expect_eq(p.returncode, 0, "exit: %r" % p.stderr)
        expect("\033" not in p.stdout, "no escapes when not a terminal")
        expect(re.search(r"since start\s+66\.7%\s+\(2 hits, 1 misses\)", p.stdout), p.stdout)
        expect(re.search(r"^site_a\s+0\.0\s", p.stdout, re.M), p.stdout)
        expect_eq(p.stdout.count("cistern top"), 1, "one frame")


@harness.timeout(180)
def test_top_in_tmux_under_ab():
    if shutil.which("tmux") is None or shutil.which("ab") is None:
        raise harness.SkipTest("tmux and ab needed")
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        curl([c.url(CACHEABLE), "-H", "Host: a.test"])      # the one miss
        sock = os.path.join(tempfile.mkdtemp(prefix="cistern-tmux-"), "tmux.sock")
        tm = ["tmux", "-S", sock]
        cmd = "%s ctl -c %s top" % (harness.cistern_bin(), c.confdir)
        subprocess.run(tm + ["new-session", "-d", "-x", "100", "-y", "30", cmd], check=True)
        try:
            # a known load: 4 clients on keep-alive, every answer a hit
            abp = subprocess.Popen(["ab", "-q", "-k", "-c", "4", "-t", "10", "-n", "10000000",
                                    "-H", "Host: a.test", c.url(CACHEABLE)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            # a frame with the load in it: from 3 s on (the rates need two
            # samples), the first whose URL rows are drawn; on a loaded
            # machine the first frames may come late
            time.sleep(3)
            t_end = time.monotonic() + 5
            while True:
                screen = subprocess.run(tm + ["capture-pane", "-p"], capture_output=True,
                                        text=True).stdout
                if re.search(r"1  a\.test", screen) or time.monotonic() > t_end:
                    break
                time.sleep(0.5)
            out = abp.communicate(timeout=60)[0].decode()
            rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
            print("---- top under ab (ab: %.0f req/s) ----\n%s----" % (rps, screen.rstrip()))
            m = re.search(r"requests/s\s+([\d.]+)", screen)
            expect(m, "no requests/s on the screen:\n" + screen)
            seen = float(m.group(1))
            expect(rps / 3 <= seen <= rps * 3, "top says %.0f req/s, ab %.0f" % (seen, rps))
            expect(re.search(r"hit ratio\s+100\.0%", screen), "hit ratio:\n" + screen)
            m = re.search(r"^site_a\s+([\d.]+)\s+100\.0%", screen, re.M)
            expect(m and float(m.group(1)) > 0, "site_a row:\n" + screen)
            expect(re.search(r"latency ms\s+p50 [\d.]+\s+p90 [\d.]+\s+p99 [\d.]+", screen), screen)
            # the URL's own row: its rate, and every request but the first a hit
            m = re.search(r"^\s+([\d.]+)\s+([\d.]+)%%\s+(\d+)\s+(\d+)\s+1  a\.test%s$"
                          % re.escape(CACHEABLE), screen, re.M)
            expect(m, "URL row:\n" + screen)
            expect(rps / 3 <= float(m.group(1)) <= rps * 3, "URL row %s req/s, ab %.0f" % (m.group(1), rps))
            # requests count at the lookup, hits at the answer: ab's 4 in flight
            inflight = int(m.group(3)) - int(m.group(4)) - 1
            expect(0 <= inflight <= 8, "URL requests - hits - the one miss: %d" % inflight)
            subprocess.run(tm + ["send-keys", "q"])
            wait_for(lambda: subprocess.run(tm + ["has-session"], capture_output=True).returncode != 0,
                     10, what="top to quit on q")
        finally:
            subprocess.run(tm + ["kill-server"], capture_output=True)


URL_A = CACHEABLE + "&u=a"
URL_B = CACHEABLE + "&u=b"
URL_C = "/headers?Cache-Control=no-store&u=c"


def get_many(c, path, n, per_conn=10):
    """n GETs of path on keep-alive connections of per_conn requests each
    (so more than one worker serves them); the statuses."""
    got = []
    while len(got) < n:
        h = http.client.HTTPConnection("127.0.0.1", c.port, timeout=20)
        for _ in range(min(per_conn, n - len(got))):
            h.request("GET", path, headers={"Host": "a.test"})
            r = h.getresponse()
            r.read()
            got.append(r.status)
        h.close()
    return got


def known_load(c):
    """/a: 1 miss then 50 hits; /b: 1 miss then 10 hits; /c: 5 misses."""
    for path, n in ((URL_A, 51), (URL_B, 11), (URL_C, 5)):
        expect_eq(get_many(c, path, 1), [200], path + " first")
        expect_eq(get_many(c, path, n - 1), [200] * (n - 1), path)


def url_rows(c, *args):
    rc, j = ctl_json(c, "url", "top", *args)
    expect_eq(rc, 0, "url top exit: %r" % j)
    rows, i = [], 1
    while "url.%d" % i in j:
        rows.append((j["url.%d" % i], j["url.%d.requests" % i], j["url.%d.hits" % i],
                     j["url.%d.misses" % i]))
        i += 1
    return rows


def lookup_counts(c, path):
    rc, j = ctl_json(c, "cache", "lookup", "http://a.test" + path)
    expect("hits" in j and "hits_note" in j, "lookup has hits: %r" % j)
    return j["hits"], j["misses"], j["requests"], j["hits_tracked"]


@harness.timeout(150)
def test_url_top_and_lookup_hits():
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        known_load(c)
        a, b, cc = ("a.test" + p for p in (URL_A, URL_B, URL_C))
        expect_eq(url_rows(c), [(a, 51, 50, 1), (b, 11, 10, 1), (cc, 5, 0, 5)], "by requests")
        expect_eq(url_rows(c, "2"), [(a, 51, 50, 1), (b, 11, 10, 1)], "two rows")
        expect_eq(url_rows(c, "misses"), [(cc, 5, 0, 5), (a, 51, 50, 1), (b, 11, 10, 1)], "by misses")
        expect_eq(lookup_counts(c, URL_A), (50, 1, 51, True), "lookup /a")
        expect_eq(lookup_counts(c, URL_B), (10, 1, 11, True), "lookup /b")
        expect_eq(lookup_counts(c, URL_C), (0, 5, 5, True), "lookup /c (not stored)")
        expect_eq(lookup_counts(c, CACHEABLE + "&u=never"), (0, 0, 0, False), "never asked")
        p = ctl(c, "url", "top")
        expect_eq(p.returncode, 0, "text exit")
        lines = p.stdout.splitlines()
        expect(re.match(r"\s*REQUESTS\s+HITS\s+MISSES\s+\+-ERROR\s+URL$", lines[0]), p.stdout)
        expect(re.match(r"\s*51\s+50\s+1\s+0\s+" + re.escape(a) + "$", lines[1]), p.stdout)
        expect_eq(ctl(c, "url", "top", "0").returncode, 2, "N out of range")
        expect_eq(ctl(c, "url", "top", "x").returncode, 2, "not a number")
        # a reload retires the workers: their tables are merged, not lost
        expect_eq(ctl(c, "config", "reload").returncode, 0, "reload")
        wait_for(lambda: ctl_json(c, "config", "status")[1].get("workers_ready") == 2, 10,
                 what="the new workers")
        expect_eq(url_rows(c)[0], (a, 51, 50, 1), "after the reload")
        expect_eq(get_many(c, URL_A, 5), [200] * 5, "5 more hits")
        expect_eq(lookup_counts(c, URL_A), (55, 1, 56, True), "old and new generations add up")
        # the bound: 600 URLs seen once each leave /a's figures exact
        for i in range(0, 600, 100):
            expect_eq(get_many(c, URL_C + "&n=%d" % i, 1), [200], "one-off")
            h = http.client.HTTPConnection("127.0.0.1", c.port, timeout=20)
            for k in range(i, i + 100):
                h.request("GET", URL_C + "&n=%d" % k, headers={"Host": "a.test"})
                h.getresponse().read()
            h.close()
        rows = url_rows(c, "100")
        expect(len(rows) <= 100, "at most 100 rows")
        expect_eq(rows[0], (a, 56, 55, 1), "/a still first, exact")
        expect_eq(lookup_counts(c, URL_A), (55, 1, 56, True), "/a's lookup past the bound")
        rc, j = ctl_json(c, "url", "top", "100")
        expect(all(j["url.%d.requests" % i] - j["url.%d.error" % i] >= 1 for i in range(1, len(rows) + 1)),
               "requests - error is a lower bound of at least one")


def test_url_label_of_a_large_hit():
    """A URL whose every request is a hit (pushed, never fetched) and whose
    body goes out after its head (2 MiB, the request parks before DONE):
    labelled and counted like the others."""
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"],
                                records={"proxy.config.http.push_method_enabled": 1}) as c:
        body = os.urandom(2 << 20)
        head = b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: %d\r\n\r\n" % len(body)
        r = harness.one_request(c.port, "PUSH", "/big", head + body, (), "a.test", None, 30.0)
        expect(r is not None and r.status in (200, 201), "PUSH: %r" % (r and r.status))
        for _ in range(3):
            h = http.client.HTTPConnection("127.0.0.1", c.port, timeout=20)
            h.request("GET", "/big", headers={"Host": "a.test"})
            g = h.getresponse()
            expect_eq(g.read(), body, "the pushed body")
            h.close()
        expect_eq(url_rows(c), [("a.test/big", 3, 3, 0)], "rows")
        expect_eq(lookup_counts(c, "/big"), (3, 0, 3, True), "lookup")


@harness.timeout(150)
def test_top_url_rows_in_tmux():
    if shutil.which("tmux") is None:
        raise harness.SkipTest("tmux needed")
    with Origin() as o, Cistern(remap=remap(o), storage=["cache 64M"]) as c:
        known_load(c)
        p = ctl(c, "top", "-n", "1")
        expect_eq(p.returncode, 0, "plain frame")
        expect(re.search(r"misses  URL \(by requests\)$", p.stdout, re.M), p.stdout)
        sock = os.path.join(tempfile.mkdtemp(prefix="cistern-tmux-"), "tmux.sock")
        tm = ["tmux", "-S", sock]
        cmd = "%s ctl -c %s top" % (harness.cistern_bin(), c.confdir)
        subprocess.run(tm + ["new-session", "-d", "-x", "110", "-y", "40", cmd], check=True)
        try:
            def screen():
                return subprocess.run(tm + ["capture-pane", "-p"], capture_output=True, text=True).stdout
            wait_for(lambda: "URL (by misses)" in screen(), 10, what="the URL rows")
            time.sleep(1.5)     # a second frame: rates known
            s = screen()
            print("---- top after the known load ----\n%s----" % s.rstrip())
            row = lambda p: r"^\s+([\d.]+|-)\s+([\d.]+)%%\s+(\d+)\s+(\d+)\s+(\d+)  a\.test%s$" % re.escape(p)
            byreq = s[s.index("URL (by requests)"):s.index("URL (by misses)")]
            bymiss = s[s.index("URL (by misses)"):]
            # a second frame after the load: no requests in between
            expect(re.search(r"^\s+0\.0\s+98\.0%", byreq, re.M), "rate of /a:\n" + s)
            found = [(m.start(), m.groups()[1:]) for p in (URL_A, URL_B, URL_C)
                     for m in [re.search(row(p), byreq, re.M)] if m]
            expect_eq([g for _, g in sorted(found)],
                      [("98.0", "51", "50", "1"), ("90.9", "11", "10", "1"), ("0.0", "5", "0", "5")],
                      "rows by requests, in order:\n" + s)
            found = [(m.start(), m.groups()[1:]) for p in (URL_C, URL_A, URL_B)
                     for m in [re.search(row(p), bymiss, re.M)] if m]
            expect_eq([g for _, g in sorted(found)],
                      [("0.0", "5", "0", "5"), ("98.0", "51", "50", "1"), ("90.9", "11", "10", "1")],
                      "rows by misses, in order:\n" + s)
            subprocess.run(tm + ["send-keys", "q"])
            wait_for(lambda: subprocess.run(tm + ["has-session"], capture_output=True).returncode != 0,
                     10, what="top to quit on q")
        finally:
            subprocess.run(tm + ["kill-server"], capture_output=True)


if __name__ == "__main__":
    harness.main()
