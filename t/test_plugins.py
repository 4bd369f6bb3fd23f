"""Issue 22: plugins.  remap.config's @plugin=NAME.so @pparam=... and
plugin.config, loaded by the master (so `cistern -t` and a reload catch a
missing file, a bad argument or another ABI with file:line), the shipped
plugins (generator.so as a cached synthetic origin, headers.so,
cachekey.so), two plugins in order on one rule, a global plugin, a
failing reload keeping the old configuration, and a crashing plugin taking
down only its worker (respawned, the plugin named in the log).

The plugins are the build tree's (proxy.config.plugin.plugin_dir points at
the build's plugins/); the ABI-mismatch plugin is compiled by the test."""
import contextlib
import http.client
from email.utils import formatdate
import os
import shutil
import socket
import subprocess
import tempfile
import time

import harness
from harness import Cistern, Origin, check_config, curl, expect, expect_eq, \
    expect_in, wait_for

PD = os.path.join(os.path.dirname(os.path.abspath(harness.cistern_bin())), "plugins")
REC = {"proxy.config.plugin.plugin_dir": PD}
GEN = "map http://gen.test/ http://127.0.0.1/ @plugin=generator.so"


def get(c, path, host, *extra):
    return curl([c.url(path), "-H", "Host: " + host] + list(extra))


def named(r, name):
    """Every value of field name (any case) in r's head, in order."""
    return [v for k, v in r.headers if k.lower() == name.lower()]


def test_generator_is_a_cached_origin():
    with Cistern(records=REC, storage=["cache 64M"], remap=[GEN]) as c:
        r1 = get(c, "/cache/1024/a", "gen.test")
        expect_eq(r1.status, 200, "first status")
        expect_eq(r1.body, b"x" * 1024, "body")
        expect_in("public, max-age=86400", r1.header("Cache-Control", ""), "Cache-Control")
        expect_in("stored", r1.header("Cache-Status", ""), "first Cache-Status")
        r2 = get(c, "/cache/1024/a", "gen.test")
        expect_eq(r2.body, b"x" * 1024, "hit body")
        expect_in("hit", r2.header("Cache-Status", ""), "second Cache-Status (a plain hit)")
        expect(r2.header("Age") is not None, "a hit has Age")
        # nocache: never stored
        for _ in range(2):
            r = get(c, "/nocache/100/b", "gen.test")
            expect_eq(r.body, b"x" * 100, "nocache body")
            expect(" hit" not in r.header("Cache-Status", ""), "nocache was a hit: %r" % r)
        # sizes with suffix, larger than a buffer, and HEAD
        r = get(c, "/cache/100K/big", "gen.test")
        expect_eq(len(r.body), 100 * 1024, "100K body")
        r = get(c, "/cache/100K/big", "gen.test")
        expect_eq(len(r.body), 100 * 1024, "100K hit body")
        expect_eq(get(c, "/elsewhere", "gen.test").status, 404, "unknown path")
        r = curl([c.url("/cache/5/h"), "-H", "Host: gen.test", "-I"])
        expect_eq((r.status, r.header("Content-Length")), (200, "5"), "HEAD")


def test_generator_sizes_past_its_range():
    """generator.so's SIZE and max-size past INT64_MAX (intercept_answer's
    length is signed), a suffix among them: 17179869185G once shifted its
    bits out and answered 1 GiB, 17179869184G an empty 200; now 404, and a
    max-size past it a load error."""
    with Cistern(records=REC, storage=["cache 64M"], remap=[GEN]) as c:
        for size in ("17179869185G", "17179869184G", "9007199254740993M",
                     "9223372036854775808"):
            r = curl([c.url("/cache/%s/o" % size), "-H", "Host: gen.test", "-I"])
            expect_eq(r.status, 404, "SIZE %s" % size)
        r = curl([c.url("/cache/8589934591G/o"), "-H", "Host: gen.test", "-I"])
        expect_eq(r.status, 400, "the largest SIZE with G, over max-size")
    r = check_config(records=REC, remap=[GEN + " @pparam=max-size=8589934592G"])
    expect_in('remap.config:1: plugin generator.so: unknown argument "max-size=8589934592G"',
              r.stdout + r.stderr, "cistern -t")


def test_headers_plugin():
    with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
            "map http://h.test/ http://%s/ @plugin=headers.so "
            "@pparam=set-req:X-To-Origin:yes @pparam=rm-req:X-Drop "
            "@pparam=rm-origin:X-Secret @pparam=set-resp:X-Served:edge "
            "@pparam=if-status=404 @pparam=set-resp:X-Missing:1 "
            "@pparam=if-field=X-Debug=on @pparam=add-resp:X-Debugged:1" % o.authority]) as c:
        r = get(c, "/headers?Cache-Control=max-age%3D60&X-Secret=s&X-Kept=k", "h.test",
                "-H", "X-Drop: 1")
        expect_eq(r.status, 200, "status")
        expect_eq(r.header("X-Served"), "edge", "set-resp on a miss")
        expect_eq(r.header("X-Secret"), None, "rm-origin")
        expect_eq(r.header("X-Kept"), "k", "other origin fields kept")
        expect_eq(r.header("X-Missing"), None, "if-status=404 on a 200")
        req = o.requests()[-1]
        names = {k.lower(): v for k, v in req["headers"]}
        expect_eq(names.get("x-to-origin"), "yes", "set-req at the origin")
        expect("x-drop" not in names, "rm-req: the origin got X-Drop")
        # the hit: stored without X-Secret, X-Served added again
        r = get(c, "/headers?Cache-Control=max-age%3D60&X-Secret=s&X-Kept=k", "h.test",
                "-H", "X-Debug: on")
        expect_in("hit", r.header("Cache-Status", ""), "second is a hit")
        expect_eq((r.header("X-Served"), r.header("X-Secret"), r.header("X-Kept")),
                  ("edge", None, "k"), "the hit's fields")
        expect_eq(r.header("X-Debugged"), "1", "if-field=X-Debug=on")
        r = get(c, "/status/404", "h.test")
        expect_eq((r.status, r.header("X-Missing")), (404, "1"), "if-status=404")


def test_headers_edit_the_client_head_in_place():
    """send_response's changes are made in the client's head where it is:
    set over a field named in another case, rm of a field the head has
    twice (and of one it has not), two adds, add then rm of the same name
    in one hook; the same on the miss and on the hit, and the head still
    frames the body."""
    with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
            "map http://e.test/ http://%s/ @plugin=headers.so "
            "@pparam=set-resp:x-kept:new @pparam=rm-resp:X-Twice @pparam=rm-resp:X-None "
            "@pparam=add-resp:X-A:1 @pparam=add-resp:X-A:2 "
            "@pparam=add-resp:X-Tmp:t @pparam=rm-resp:x-tmp "
            "@pparam=set-resp:Cache-Control:private" % o.authority]) as c:
        path = ("/headers?Cache-Control=max-age%3D60&X-Kept=old&X-Twice=1"
                "&X-Other=o&x-twice=2")
        for what in ("miss", "hit"):
            r = get(c, path, "e.test")
            expect_eq(r.status, 200, what + " status")
            if what == "hit":
                expect_in("hit", r.header("Cache-Status", ""), "second is a hit")
            expect_eq(named(r, "X-Kept"), ["new"], what + ": set over X-Kept")
            expect_eq(named(r, "X-Twice"), [], what + ": rm of a field given twice")
            expect_eq(named(r, "X-A"), ["1", "2"], what + ": two adds, in order")
            expect_eq(named(r, "X-Tmp"), [], what + ": add then rm in one hook")
            expect_eq(named(r, "X-Other"), ["o"], what + ": others kept")
            expect_eq(named(r, "Cache-Control"), ["private"],
                      what + ": set over the origin's Cache-Control")
            expect_eq(len(r.body), int(r.header("Content-Length")), what + ": framing")
        expect_eq(len(o.requests()), 1, "stored once (set-resp is the client's, "
                  "not the stored copy's)")


def test_hit_head_edits_see_every_field():
    """A set or remove on a hit's head skips its scan when the name cannot
    be there (worker/plugin.c keeps which names each stored head holds):
    each field the hit's head gets from Cistern (Age, Cache-Status, Via,
    Server, X-Cistern-Worker) and from the stored head is still found, a
    field a hook added is found by a later remove, and an object pushed
    again with other fields is seen as it is now, on repeated hits."""
    records = dict(REC)
    records.update({"proxy.config.http.push_method_enabled": 1,
                    "proxy.config.cistern.debug_headers": 1,
                    "proxy.config.http.insert_response_via_str": 1})
    sets = ["Age", "Cache-Status", "Via", "Server", "X-Cistern-Worker", "Content-Type",
            "X-Stored"]
    with Origin() as o, Cistern(records=records, storage=["cache 64M"], remap=[
            "map http://h.test/ http://%s/ @plugin=headers.so " % o.authority
            + " ".join("@pparam=set-resp:%s:p%d" % (n, i) for i, n in enumerate(sets))
            + " @pparam=rm-resp:Date @pparam=rm-resp:X-Later"
            " @pparam=add-resp:X-Tmp:1 @pparam=rm-resp:X-Tmp"]) as c:
        def push(extra):
            head = (b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Type: a/b\r\n"
                    b"X-Stored: s\r\nDate: " + formatdate(usegmt=True).encode() + b"\r\n" + extra
                    + b"Content-Length: 2\r\n\r\nok")
            r = harness.one_request(c.port, "PUSH", "/o", head, (), "h.test", None, 20.0)
            expect(r is not None and r.status in (200, 201), "PUSH: %r" % (r and r.status))
        for version, extra in ((1, b""), (2, b"X-Later: 1\r\nX-Later: 2\r\n")):
            push(extra)
            for i in range(3):
                r = get(c, "/o", "h.test")
                what = "version %d, hit %d" % (version, i)
                for k, n in enumerate(sets):
                    expect_eq(named(r, n), ["p%d" % k], "%s: %s set" % (what, n))
                expect_eq((named(r, "Date"), named(r, "X-Later"), named(r, "X-Tmp")),
                          ([], [], []), what + ": removed")
                expect_eq(r.body, b"ok", what + ": body")
        expect_eq(len(o.requests()), 0, "every answer from the cache")


def test_remap_deny_with_its_status_and_text():
    """A remap hook's deny(): its status and text answer the request and
    the origin is not asked; without a text, the status's own; CST_DENY
    without a deny call, 403 and its text (not an earlier request's on
    the connection); deny() then CST_CONTINUE lets the request through."""
    d = tempfile.mkdtemp(prefix="cistern-plug-")
    try:
        rv = _test_plugin(d, "review")
        with Origin() as o, Cistern(records=REC, remap=[
                "map http://%s.test/ http://%s/ @plugin=%s @pparam=%s" % (h, o.authority, rv, a)
                for h, a in (("d1", "deny=451:blocked-here"), ("d2", "deny-bare"),
                             ("d3", "deny=429"), ("d4", "deny-late=451:late"))]) as c:
            h = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
            for host, status, text in (("d1", 451, "blocked-here"), ("d2", 403, "Forbidden"),
                                       ("d3", 429, "Too Many Requests"), ("d4", 200, "GET /x"),
                                       ("d2", 403, "Forbidden")):
                h.request("GET", "/x", headers={"Host": host + ".test"})
                r = h.getresponse()
                body = r.read().decode("latin-1")
                expect_eq(r.status, status, host + ": status")
                expect_in(text, body, host + ": body")
                expect("blocked" not in body or host == "d1", host + ": another's text")
            h.close()
            expect_eq([q["path"] for q in o.requests()], ["/x"], "only d4 reached the origin")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_cachekey_plugin():
    with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
            "map http://k.test/ http://%s/ @plugin=cachekey.so "
            "@pparam=--exclude-params=utm,fbclid @pparam=--include-headers=X-Tenant"
            % o.authority]) as c:
        base = "/headers?Cache-Control=max-age%3D60&a=1"
        for q in ("&utm=x", "&utm=y&fbclid=z", ""):
            r = get(c, base + q, "k.test", "-H", "X-Tenant: t1")
            expect_eq(r.status, 200, "status")
        expect_eq(len(o.requests()), 1, "one origin fetch for three URLs differing in "
                  "excluded params")
        expect_in("utm=x", o.requests()[0]["target"], "the origin gets the whole URL")
        get(c, base, "k.test", "-H", "X-Tenant: t2")
        expect_eq(len(o.requests()), 2, "another X-Tenant is another key")
        get(c, base + "&b=2", "k.test", "-H", "X-Tenant: t2")
        expect_eq(len(o.requests()), 3, "a kept parameter is part of the key")


def test_two_plugins_in_order_and_global():
    with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
            "map http://two.test/ http://%s/ @plugin=headers.so @pparam=add-resp:X-Order:1 "
            "@plugin=headers.so @pparam=add-resp:X-Order:2 @pparam=rm-resp:X-Global"
            % o.authority,
            "map http://plain.test/ http://%s/" % o.authority],
            files={"plugin.config": "# global\nheaders.so add-resp:X-Global:g "
                   "add-resp:X-Order:0\n"}) as c:
        r = get(c, "/x", "two.test")
        vals = [v for k, v in r.headers if k.lower() == "x-order"]
        expect_eq(vals, ["0", "1", "2"], "global first, then the rule's in order")
        expect_eq(r.header("X-Global"), None, "the rule's second plugin removed it")
        r = get(c, "/y", "plain.test")
        expect_eq(r.header("X-Global"), "g", "the global plugin on a rule without plugins")


def test_fields_refused_and_found_anywhere():
    """The API's field checks and its scan of the client's head (both
    word- and vector-wide in worker/plugin.c, so their edges are tried):
    fields.so (t/plugin_fields.c) adds names and values with a refused byte
    at each end and inside, of 1 to 17 bytes; headers.so sets and removes
    fields that the origin's head has after 0 to 99 bytes of padding, so
    the line falls at every offset of the scan's 32- and 64-byte steps,
    and removes the head's last field (Server, Cistern's)."""
    d = tempfile.mkdtemp(prefix="cistern-plug-")
    try:
        fields = _test_plugin(d, "fields")
        with Origin() as o, Cistern(records=REC, remap=[
                "map http://f.test/ http://%s/ @plugin=%s" % (o.authority, fields),
                "map http://s.test/ http://%s/ @plugin=headers.so @pparam=set-resp:x-kept:new "
                "@pparam=rm-resp:X-Gone @pparam=rm-resp:server" % o.authority]) as c:
            r = get(c, "/x", "f.test")
            expect_eq(r.header("X-Field-Results"), " ".join(["0"] * 5 + ["-1"] * 14),
                      "field_add's answers (t/plugin_fields.c's table)")
            expect_eq((r.header("X-Served-By"), r.header("X-Tab")), ("edge", "a\tb"),
                      "accepted fields are in the head")
            expect_eq(r.header("X-Put-Results"), " ".join(["0"] * 5 + ["-1"] * 14),
                      "field_prepare's and field_put's answers, the same table")
            expect_eq((named(r, "X-Served-By"), named(r, "X-Abcdefg")), (["edge"], [""]),
                      "field_put's CST_FIELD_SET replaced field_add's line")
            for pad in range(100):
                r = get(c, "/headers?X-Pad=%s&X-Kept=old&X-Gone=1&x-gone=2" % ("p" * pad),
                        "s.test")
                expect_eq((r.status, named(r, "X-Kept"), named(r, "X-Gone"),
                           named(r, "Server"), named(r, "X-Pad")),
                          (200, ["new"], [], [], ["p" * pad] if pad else [""]),
                          "after %d bytes of padding" % pad)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _abi_plugin(d):
    src = os.path.join(d, "abi.c")
    with open(src, "w") as f:
        f.write('#include "cistern/plugin.h"\n'
                'CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = '
                '{ .abi = CST_PLUGIN_ABI + 98, .name = "abi" };\n')
    out = os.path.join(d, "abi.so")
    p = subprocess.run(["cc", "-shared", "-fPIC", "-I", harness.srcdir(), "-o", out, src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise harness.SkipTest("cannot build a test plugin: %s" % p.stdout[-300:])
    return out


def test_check_reports_plugin_errors():
    d = tempfile.mkdtemp(prefix="cistern-plug-")
    try:
        abi = _abi_plugin(d)
        cases = [
            (["map http://a.test/ http://o.test/", GEN.replace("generator", "nosuch")],
             None, "remap.config:2: plugin nosuch.so: cannot load"),
            ([GEN + " @pparam=bogus"], None,
             'remap.config:1: plugin generator.so: unknown argument "bogus"'),
            (["map http://a.test/ http://o.test/ @plugin=%s" % abi], None,
             "remap.config:1: plugin %s: built for plugin ABI 99" % abi),
            (["map http://a.test/ http://o.test/ @pparam=x @plugin=generator.so"], None,
             "remap.config:1: @pparam=x: @pparam= before any @plugin="),
            (["redirect http://a.test/ http://o.test/ @plugin=generator.so"], None,
             "remap.config:1: redirect: @plugin= runs on map rules only"),
            (["map http://a.test/ http://o.test/"], "\n\nheaders.so\n",
             "plugin.config:3: plugin headers.so: no operation given"),
            (["map http://a.test/ http://o.test/ @plugin=/lib/x86_64-linux-gnu/libc.so.6"],
             None, "exports no cistern_plugin"),
            # headers.so checks its fields when it loads (field_prepare)
            (["map http://a.test/ http://o.test/ @plugin=headers.so "
              "@pparam=set-resp:X-Bad\x01Name:1"], None,
             'remap.config:1: plugin headers.so: "set-resp:X-Bad\x01Name:1": a field name '
             "is a token"),
            # ... and the fields the proxy frames and routes by, removed too
            (["map http://a.test/ http://o.test/ @plugin=headers.so @pparam=add-resp:X-A:1",
              "map http://b.test/ http://o.test/ @plugin=headers.so "
              "@pparam=rm-origin:transfer-encoding"], None,
             'remap.config:2: plugin headers.so: "rm-origin:transfer-encoding": a field name '
             "is a token (no space, control byte or ':') and not one the proxy frames"),
            (["map http://a.test/ http://o.test/ @plugin=headers.so "
              "@pparam=set-resp:Content-Length:3"], None, '"set-resp:Content-Length:3": a'),
            (["map http://a.test/ http://o.test/"], "headers.so set-req:Host:x\n",
             'plugin.config:1: plugin headers.so: "set-req:Host:x": a'),
        ]
        for remap, pcfg, want in cases:
            files = {"plugin.config": pcfg} if pcfg else None
            r = check_config(records=REC, remap=remap, files=files)
            expect(r.rc != 0, "cistern -t passed %r" % remap)
            expect_in(want, r.stdout + r.stderr, "cistern -t output for %r" % remap)
        r = check_config(records=REC, remap=[GEN + " @pparam=max-size=1M"])
        expect_eq(r.rc, 0, "a good plugin passes: %s" % r.stderr)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_reload_with_failing_plugin_keeps_config():
    with Cistern(records=REC, storage=["cache 64M"], remap=[GEN]) as c:
        expect_eq(get(c, "/nocache/3/a", "gen.test").body, b"xxx", "before")
        c.write_file("remap.config", GEN + " @pparam=nonsense\n")
        c.expect_log(r"unknown argument")
        c.expect_log(r"reload failed|keeping")
        c.reload()
        c.wait_log(r'unknown argument "nonsense"', timeout=10)
        time.sleep(0.5)
        expect_eq(get(c, "/nocache/3/a", "gen.test").body, b"xxx", "after the failed reload")
        c.write_file("remap.config", GEN.replace("gen.test", "gen2.test") + "\n")
        c.reload()
        wait_for(lambda: get(c, "/nocache/4/a", "gen2.test").status == 200, timeout=10,
                 what="the good reload")
        expect_eq(get(c, "/nocache/4/a", "gen.test").status, 404, "old rule gone")


def test_crashing_plugin_kills_only_its_worker():
    if harness.sanitizer_build():
        raise harness.SkipTest("sanitizer build: ASan reports the deliberate crash itself")
    with Cistern(records=REC, storage=["cache 64M"], remap=[GEN + " @pparam=debug-crash"],
                 workers=2) as c:
        c.expect_log(r"killed by signal|SIGSEGV")
        before = set(c.worker_pids())   # (the cache manager too, when unnamed)
        r = get(c, "/crash/1", "gen.test")
        expect(r.status is None or r.status >= 500, "a crash answered %r" % r)
        c.wait_log(r"worker \d \(pid \d+, generation 1\) killed by signal 11.*"
                   r"in plugin generator\.so", timeout=10)
        wait_for(lambda: len(set(c.worker_pids())) == len(before)
                 and set(c.worker_pids()) != before, timeout=10, what="the worker respawned")
        expect_eq(len(before - set(c.worker_pids())), 1, "processes replaced")
        expect(c.alive(), "the master died")
        expect_eq(get(c, "/cache/10/z", "gen.test").body, b"x" * 10, "served after")


def _test_plugin(d, name):
    """NAME.so (t/plugin_NAME.c), a test-only plugin, built into d."""
    out = os.path.join(d, name + ".so")
    src = os.path.join(harness.srcdir(), "t", "plugin_%s.c" % name)
    p = subprocess.run(["cc", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                        "-I", harness.srcdir(), "-o", out, src],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise harness.SkipTest("cannot build %s.so: %s" % (name, p.stdout[-300:]))
    return out


def _send_get(port, path, host):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
               % (path, host)).encode())
    return s, time.monotonic()


def _read_timed(s, t0):
    """Everything until the close: (head, body, [(seconds since t0, body
    bytes so far)] one per read that brought body bytes, head seconds)."""
    data, reads, head_t = b"", [], None
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
        now = time.monotonic() - t0
        if head_t is None and b"\r\n\r\n" in data:
            head_t = now
        if b"\r\n\r\n" in data:
            n = len(data.split(b"\r\n\r\n", 1)[1])
            if n and (not reads or reads[-1][1] != n):
                reads.append((now, n))
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body, reads, head_t


def test_deferred_intercept_streams_its_body():
    """An intercept that answers later (CST_AGAIN, resumed by a worker
    timer) and streams its body in pieces (the producer says CST_AGAIN
    between them): the worker serves other requests meanwhile, the client
    gets the head after the delay and the body piece by piece, the answer
    is stored like an origin's (the next is a hit), and the plugin's done
    is called once."""
    d = tempfile.mkdtemp(prefix="cistern-plug-")
    try:
        slow = _test_plugin(d, "slow")
        with Cistern(records=REC, storage=["cache 64M"], workers=1, remap=[
                GEN, "map http://slow.test/ http://127.0.0.1/ @plugin=%s @pparam=head-ms=1000 "
                "@pparam=steps=3 @pparam=step-ms=300 @pparam=chunk=1000" % slow]) as c:
            s, t0 = _send_get(c.port, "/s/1", "slow.test")
            r = get(c, "/cache/10/other", "gen.test")
            expect_eq(r.body, b"x" * 10, "another request, while the intercept waits")
            s.setblocking(False)
            try:
                early = s.recv(1)
            except BlockingIOError:
                early = None
            s.setblocking(True)
            expect_eq(early, None, "the deferred answer came before the other request "
                      "was served")
            head, body, reads, head_t = _read_timed(s, t0)
            expect_in("HTTP/1.1 200", head, "status")
            expect_in("Content-Length: 3000", head, "length")
            expect(head_t >= 0.9, "the head came after %.2f s, not after head-ms=1000"
                   % head_t)
            expect_eq(body, b"a" * 1000 + b"b" * 1000 + b"c" * 1000, "body")
            expect(len(reads) >= 2 and reads[-1][0] - reads[0][0] >= 0.3,
                   "the body came in pieces over time: %r" % reads)
            c.wait_log(r"slow: done /s/1 after 3000 body bytes", timeout=5)
            r = get(c, "/s/1", "slow.test")
            expect_in("hit", r.header("Cache-Status", ""), "the intercept's answer is stored")
            expect_eq(r.body, body, "the hit's body")
            expect_eq(c.error_log().count("slow: done"), 1, "done calls")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_deferred_intercept_ends():
    """A deferred intercept's other ends: a body of unknown length (ended
    by the close), a client gone before the head and one gone within the
    body (done is called, the worker goes on), a resumed intercept that
    does not answer (502)."""
    d = tempfile.mkdtemp(prefix="cistern-plug-")
    try:
        slow = _test_plugin(d, "slow")
        rule = "map http://%s/ http://127.0.0.1/ @plugin=" + slow + " %s"
        with Cistern(records=REC, storage=["cache 64M"], workers=1, remap=[
                GEN,
                rule % ("close.test", "@pparam=head-ms=50 @pparam=step-ms=50 "
                        "@pparam=steps=2 @pparam=length=close"),
                rule % ("gone.test", "@pparam=head-ms=600"),
                rule % ("mid.test", "@pparam=head-ms=50 @pparam=steps=5 @pparam=step-ms=300"),
                rule % ("fail.test", "@pparam=head-ms=50 @pparam=fail")]) as c:
            c.expect_log(r"plugin|origin|upstream|502")
            before = set(c.worker_pids())
            r = get(c, "/c/1", "close.test")
            expect_eq((r.status, r.body), (200, b"a" * 100 + b"b" * 100),
                      "a body ended by the close")
            s, _ = _send_get(c.port, "/g/1", "gone.test")
            time.sleep(0.1)
            s.close()
            c.wait_log(r"slow: done /g/1 after \d+ body bytes", timeout=5)
            s, _ = _send_get(c.port, "/m/1", "mid.test")
            got = b""
            while b"a" * 100 not in got:
                got += s.recv(65536)
            s.close()
            c.wait_log(r"slow: done /m/1 after \d+ body bytes", timeout=5)
            r = get(c, "/f/1", "fail.test")
            expect_eq(r.status, 502, "a resumed intercept that does not answer")
            c.wait_log(r"slow: done /f/1 after 0 body bytes", timeout=5)
            expect_eq(get(c, "/cache/10/after", "gen.test").body, b"x" * 10, "served after")
            expect_eq(set(c.worker_pids()), before, "the same processes")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _dhat_blocks(n, path, remap):
    """The worker's lifetime heap blocks (valgrind dhat) after n keep-alive
    requests for path (after one warming request)."""
    import json
    import socket
    d = tempfile.mkdtemp(prefix="cistern-dhat-")
    wrapper = os.path.join(d, "cistern-dhat")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\nexec %s -q --tool=dhat --trace-children=yes "
                "--dhat-out-file=%s/dhat.%%p %s \"$@\"\n"
                % (shutil.which("valgrind"), d, harness.cistern_bin()))
    os.chmod(wrapper, 0o755)
    old = os.environ.get("CISTERN_BIN")
    os.environ["CISTERN_BIN"] = wrapper
    try:
        with Cistern(records=REC, storage=["cache 64M"], workers=1, start_timeout=90,
                     remap=[remap]) as c:
            wait_for(lambda: c.worker_pids() or None, 30, what="the worker under valgrind")
            s = socket.create_connection(("127.0.0.1", c.port), timeout=60)
            req = ("GET %s HTTP/1.1\r\nHost: gen.test\r\n\r\n" % path).encode()
            for _ in range(n + 1):
                s.sendall(req)
                data = b""
                while b"\r\n\r\n" not in data:
                    data += s.recv(65536)
                head, body = data.split(b"\r\n\r\n", 1)
                expect(head.startswith(b"HTTP/1.1 200"), "status: %r" % head[:40])
                cl = int([ln.split(b":")[1] for ln in head.split(b"\r\n")
                          if ln.lower().startswith(b"content-length:")][0])
                while len(body) < cl:
                    body += s.recv(65536)
            s.close()
            pids = [str(p) for p in c.worker_pids()]
    finally:
        if old is None:
            del os.environ["CISTERN_BIN"]
        else:
            os.environ["CISTERN_BIN"] = old
    return harness.dhat_worker_blocks(d, pids)


@harness.timeout(600)
def test_no_heap_allocation_per_plugged_request():
    """The hook path allocates nothing per request: a hit through
    generator.so + headers.so + cachekey.so, and an uncacheable intercept
    (/nocache/), each: the worker's lifetime heap blocks are the same
    after 200 and 2000 requests (valgrind's dhat; plain builds only)."""
    if shutil.which("valgrind") is None:
        raise harness.SkipTest("valgrind not installed")
    if harness.sanitizer_build():
        raise harness.SkipTest("sanitizer build: valgrind cannot run it")
    remap = (GEN + " @plugin=headers.so @pparam=set-resp:X-A:1 @pparam=set-req:X-B:2 "
             "@plugin=cachekey.so @pparam=--exclude-params=u @pparam=--include-headers=X-T")
    for path in ("/cache/1024/a?u=1", "/nocache/1024/b"):
        few = _dhat_blocks(200, path, remap)
        many = _dhat_blocks(2000, path, remap)
        print("    %s: heap blocks %d after 200, %d after 2000" % (path, few, many))
        expect(many - few <= 2, "%s: %d more blocks for 1800 more requests"
               % (path, many - few))


@contextlib.contextmanager
def _plug_dir():
    d = tempfile.mkdtemp(prefix="cistern-rv-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _one(c, path, host, headers=()):
    return harness.one_request(c.port, "GET", path, None, list(headers), host, None, 10)


def test_sixteen_plans_global_and_rules_under_a_reload():
    """16 instances on a request (10 global, 6 a rule's), a rule without
    plugins under the global ones, hooks_off in create (twice, with bits
    no hook has, and once outside create), a prepared field put on the
    request in send_response (refused) and set over a field the client's
    head has three times; then a reload that swaps the plans while ab
    runs: every answer is one whole generation's."""
    with _plug_dir() as d:
        rv = _test_plugin(d, "review")
        glob = "".join("%s tag=g%d\n" % (rv, i) for i in range(9))
        glob += "%s tag=goff off=12 off2=ff00\n" % rv      # no remap, no read_response
        rule = ("map http://r.test/ http://%s/ " + " ".join(
            "@plugin=%s @pparam=tag=r%d" % (rv, i) for i in range(5))
            + " @plugin=%s @pparam=put-req @pparam=set=X-Three:new @pparam=tag=r5")
        with Origin() as o:
            with Cistern(records=REC, storage=["cache 64M"], remap=[
                    rule % (o.authority, rv), "map http://p.test/ http://%s/" % o.authority],
                    files={"plugin.config": glob}) as c:
                path = "/headers?X-Three=1&x-three=2&X-THREE=3"
                r = _one(c, path, "r.test")
                expect(r is not None and r.status == 200, "r.test: %r" % r)
                tags = [v.split() for v in named(r, "X-Rv")]
                all4 = "%x" % (0x01 | 0x02 | 0x10 | 0x20)
                want = [["g%d" % i, all4] for i in range(9)] + [["goff", "21"]]
                want += [["r%d" % i, "32"] for i in range(6)]   # no read_request on a rule's
                expect_eq(tags, want, "16 instances, each its hooks, in order")
                expect_eq(named(r, "X-Rv-Create"), ["0 0"], "hooks_off in create, twice")
                expect_eq(set(named(r, "X-Rv-Late")), {"-1"}, "hooks_off outside create")
                expect_eq(named(r, "X-Rv-Put-Req"), ["-1"], "field_put on CST_REQUEST in "
                          "send_response")
                expect_eq(named(r, "X-Three"), ["new"], "CST_FIELD_SET over three lines")
                r = _one(c, "/x", "p.test")
                tags = [v.split()[0] for v in named(r, "X-Rv")]
                expect_eq(tags, ["g%d" % i for i in range(9)] + ["goff"],
                          "a rule without plugins: the global plan")
                # the reload swaps in plans of another shape under load
                glob2 = "%s tag=new off=1\n" % rv
                ab = subprocess.Popen(["ab", "-q", "-k", "-n", "20000", "-c", "8", "-H",
                                       "Host: r.test", c.url("/x")],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                time.sleep(1.0)
                c.write_file("plugin.config", glob2)
                c.reload()
                seen = set()
                t_end = time.time() + 6
                while time.time() < t_end:
                    r = _one(c, "/x", "r.test")
                    expect(r is not None and r.status == 200, "during the reload: %r" % r)
                    seen.add(tuple(v.split()[0] for v in named(r, "X-Rv")))
                    if len(seen) == 2 and ab.poll() is not None:
                        break
                out = ab.communicate(timeout=60)[0].decode("latin-1")
                expect("Failed requests:        0" in out, "ab: %s" % out[-600:])
                old = tuple(["g%d" % i for i in range(9)] + ["goff"]
                            + ["r%d" % i for i in range(6)])
                new = tuple(["new"] + ["r%d" % i for i in range(6)])
                expect(seen <= {old, new} and new in seen, "generations seen: %r" % seen)
                expect(c.alive(), "the master died")


def test_a_crash_in_txn_end_or_send_response_names_its_plugin():
    """A plugin crashing in txn_end (a plan's call of another shape, fn.end)
    or in send_response is named in the master's log like one crashing in
    its intercept."""
    if harness.sanitizer_build():
        raise harness.SkipTest("sanitizer build: ASan reports the deliberate crash itself")
    with _plug_dir() as d:
        rv = _test_plugin(d, "review")
        with Origin() as o, Cistern(records=REC, workers=1, remap=[
                "map http://x.test/ http://%s/ @plugin=%s @pparam=crash-end" % (o.authority, rv),
                "map http://y.test/ http://%s/ @plugin=headers.so @pparam=add-resp:X-A:1 "
                "@plugin=%s @pparam=crash-send" % (o.authority, rv)]) as c:
            c.expect_log(r"killed by signal|SIGSEGV")
            _one(c, "/x", "x.test")
            c.wait_log(r"killed by signal 11.*in plugin review\.so", timeout=10)
            n = c.error_log().count("in plugin review.so")
            wait_for(lambda: c.worker_pids() or None, 10, what="the worker respawned")
            time.sleep(0.5)
            _one(c, "/y", "y.test")
            wait_for(lambda: c.error_log().count("in plugin review.so") > n, 10,
                     what="the send_response crash named")


def test_prepared_fields_at_the_buffer_edge():
    """send_response's prepared fields (field_put) and headers.so's on a
    client head that ends near the output buffer's 16 KiB (so that the
    additions grow it, plug_out_room), miss and hit: the head's last field
    removed then set again, a SET over two lines and over three, a long
    add; the head still frames the body."""
    with _plug_dir() as d:
        rv = _test_plugin(d, "review")
        with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
                "map http://b.test/ http://%s/ @plugin=headers.so @pparam=rm-resp:Server "
                "@pparam=set-resp:Server:again @pparam=set-resp:X-Two:v "
                "@pparam=add-resp:X-Add:%s @plugin=%s @pparam=set=X-Three:new"
                % (o.authority, "a" * 300, rv)]) as c:
            for pad in range(15800, 16400, 5):
                path = "/big/%d" % pad
                o.script(path, [{"status": 200, "headers": [
                    ["Cache-Control", "max-age=60"], ["X-Two", "1"], ["x-two", "2"],
                    ["X-Three", "a"], ["X-Pad", "p" * pad], ["X-Three", "b"]],
                    "body": "hello"}])
                for what in ("miss", "hit"):
                    r = _one(c, path, "b.test")
                    expect(r is not None and r.status == 200, "%d %s: %r" % (pad, what, r))
                    if what == "hit":
                        expect("hit" in r.header("Cache-Status", ""), "a hit: %r" % r)
                    expect_eq((named(r, "X-Two"), named(r, "X-Three"), named(r, "Server"),
                               len(named(r, "X-Add")), r.body),
                              (["v"], ["new"], ["again"], 1, b"hello"),
                              "%s after %d bytes of padding" % (what, pad))



def _ka_exchange(s, req):
    """req on keep-alive socket s; its answer: (status line, [(name, value)],
    body), the body read by its one Content-Length (None: no answer in 5 s,
    or a head without exactly one Content-Length)."""
    s.sendall(req)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            d = s.recv(65536)
            if not d:
                return None
            data += d
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        fields = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:]]
        cls = [v for k, v in fields if k.lower() == "content-length"]
        if len(cls) != 1:
            return lines[0], fields, None
        while len(body) < int(cls[0]):
            d = s.recv(65536)
            if not d:
                return None
            body += d
    except socket.timeout:
        return None
    return lines[0], fields, body


def test_framing_and_routing_fields_stay_the_proxys():
    """A plugin that sets, adds and removes Content-Length,
    Transfer-Encoding, Connection and the hop-by-hop fields and Host in
    every hook that may change a head (t/plugin_frame.c), ignoring what the
    API answers: every call is refused (field_prepare too), the client gets
    one Content-Length that frames the body (RFC 9112 6.3), the origin one
    Host (RFC 9112 3.2) and a GET without a body or a POST framed as the
    client framed it (no request smuggled behind it), on a miss, a POST and
    an intercept, one after another on one keep-alive connection."""
    with _plug_dir() as d:
        frame = _test_plugin(d, "frame")
        with Origin() as o, Cistern(records=REC, remap=[
                "map http://f.test/ http://%s/ @plugin=%s" % (o.authority, frame),
                "map http://fi.test/ http://127.0.0.1/ @plugin=%s @pparam=intercept"
                % frame]) as c:
            s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
            asks = [("GET /bytes/10 HTTP/1.1\r\nHost: f.test\r\n\r\n", b"ABCDEFGHIJ"),
                    ("POST /bytes/7 HTTP/1.1\r\nHost: f.test\r\nContent-Length: 5\r\n\r\n"
                     "hello", b"ABCDEFG"),
                    ("GET /i HTTP/1.1\r\nHost: fi.test\r\n\r\n", b"hello")]
            for req, want in asks:
                r = _ka_exchange(s, req.encode())
                expect(r is not None, "no answer framed by one Content-Length to %r" % req)
                line, fields, body = r
                expect_eq((line, body), ("HTTP/1.1 200 OK", want), "the answer to %r" % req)
                expect_eq([k for k, _ in fields if k.lower() == "transfer-encoding"], [],
                          "Transfer-Encoding beside Content-Length")
                expect_eq([v for k, v in fields if k.lower() == "x-frame"],
                          ["remap=0 send_request=0 intercept=0 read_response=0 "
                           "send_response=0 prepare=0"], "the edits the API accepted")
            s.close()
            got = o.requests()
            expect_eq(len(got), 2, "origin requests")
            for q, body in zip(got, (b"", b"hello")):
                h = [(k.lower(), v) for k, v in q["headers"]]
                expect_eq([v for k, v in h if k == "host"], [o.authority], "Host")
                expect_eq([v for k, v in h if k in ("content-length", "transfer-encoding")],
                          ["5"] if body else [], "the request's framing")
                expect_eq(q["body"].encode("latin-1"), body, "the request's body")



def test_intercept_bodiless_statuses_carry_no_content():
    """An intercept answering 204, 205 or 304 with 5 bytes of body
    (t/plugin_frame.c's status=N): no content goes out (RFC 9110 15.3.5,
    15.3.6, 15.4.5; a 205 had its 5 bytes relayed), a 204 has no
    Content-Length (8.6), a 205 says 0, and the keep-alive connection
    answers the next request in step."""
    with _plug_dir() as d:
        frame = _test_plugin(d, "frame")
        remap = ["map http://s%d.test/ http://127.0.0.1/ @plugin=%s @pparam=intercept "
                 "@pparam=status=%d" % (st, frame, st) for st in (204, 205, 304)]
        remap.append("map http://ok.test/ http://127.0.0.1/ @plugin=%s @pparam=intercept" % frame)
        with Cistern(records=REC, remap=remap) as c:
            for st, cl in ((204, None), (205, "0"), (304, "5")):
                s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
                s.sendall(b"GET /a HTTP/1.1\r\nHost: s%d.test\r\n\r\n"
                          b"GET /b HTTP/1.1\r\nHost: ok.test\r\n\r\n" % st)
                data = b""
                while data.count(b"hello") < 1 or not data.endswith(b"hello"):
                    d2 = s.recv(65536)
                    if not d2:
                        break
                    data += d2
                s.close()
                first, _, rest = data.partition(b"\r\n\r\n")
                lines = first.decode("latin-1").split("\r\n")
                fields = [ln.split(":", 1) for ln in lines[1:]]
                expect_eq(lines[0].split(" ")[1], str(st), "the status")
                expect_eq([v.strip() for k, v in fields if k.lower() == "content-length"],
                          [cl] if cl else [], "%d: Content-Length" % st)
                expect(rest.startswith(b"HTTP/1.1 200 "),
                       "%d: the next answer follows the head at once: %r" % (st, rest[:40]))
                expect(rest.endswith(b"hello"), "%d: the next answer: %r" % (st, rest[-40:]))


def test_client_head_grows_only_to_the_head_limit():
    """A send_response hook that adds 1000-byte fields until field_add
    refuses (t/plugin_frame.c's fill): the client's head stops at
    response_header_max_size, the limit an origin's head has (it grew
    without bound, 1 MB here, as far as malloc went), on the miss and on
    the hit, and the head still frames the body."""
    with _plug_dir() as d:
        frame = _test_plugin(d, "frame")
        rec = dict(REC)
        rec["proxy.config.http.response_header_max_size"] = 32768
        with Origin() as o, Cistern(records=rec, storage=["cache 64M"], remap=[
                "map http://fill.test/ http://%s/ @plugin=%s @pparam=fill"
                % (o.authority, frame)]) as c:
            s = socket.create_connection(("127.0.0.1", c.port), timeout=5)
            for what in ("miss", "hit"):
                r = _ka_exchange(s, b"GET /headers?Cache-Control=max-age%3D60 HTTP/1.1\r\n"
                                 b"Host: fill.test\r\n\r\n")
                expect(r is not None, "%s: no answer framed by one Content-Length" % what)
                line, fields, body = r
                head = len("\r\n".join([line] + ["%s: %s" % f for f in fields])) + 4
                fill = [v for k, v in fields if k == "X-Filler"]
                expect_eq(line, "HTTP/1.1 200 OK", what)
                expect(20 < len(fill) and head <= 32768, "%s: %d fields, a head of %d bytes"
                       % (what, len(fill), head))
            s.close()
            expect_eq(len(o.requests()), 1, "the second was a hit")



def test_origin_head_edited_up_to_the_head_limit():
    """read_response's edits on an origin head between 64 KiB (the rewrite
    scratch's size, once a 502 for any head past it) and
    response_header_max_size (128 KiB): the edited head is served (too
    large to store); one that the edit (2000 bytes more) takes past the
    limit is refused (502), as the origin's own would be."""
    with Origin() as o, Cistern(records=REC, storage=["cache 64M"], remap=[
            "map http://ro.test/ http://%s/ @plugin=headers.so @pparam=set-origin:X-Seen:1 "
            "@pparam=rm-origin:X-Drop @pparam=add-origin:X-Long:%s"
            % (o.authority, "l" * 2000)]) as c:
        c.expect_log(r"does not fit|too large|head")
        for path, pad, status in (("/a", 70000, 200), ("/b", 129500, 502)):
            o.script(path, [{"status": 200, "headers": [
                ["Cache-Control", "max-age=60"], ["X-Drop", "d"], ["X-Pad", "p" * pad]],
                "body": "hello"}])
            r = _one(c, path, "ro.test")
            expect(r is not None, "%s: no answer" % path)
            expect_eq(r.status, status, path)
            if status == 200:
                expect_eq((named(r, "X-Seen"), named(r, "X-Drop"), len(r.header("X-Pad", "")),
                           len(r.header("X-Long", "")), r.body),
                          (["1"], [], pad, 2000, b"hello"), path)

if __name__ == "__main__":
    harness.main()
