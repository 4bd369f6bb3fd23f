#!/usr/bin/env python3
"""t/test_logformat.py: logging.yaml's formats as ATS writes them (issue 25).

Debian 12's stock logging.yaml (its text below, verbatim) loads and its
squid log gets lines; every field Cistern writes is checked against a
request whose bytes are known (method, URLs, status, sizes, client
address, cache result, times, request / response / origin headers);
an unknown field is a file:line error; reject and accept filters drop and
keep lines; `cistern -s reopen` moves a custom log to a new file.

Run one test: python3 -B t/test_logformat.py test_name
"""
import os
import re
import socket
import time

import harness
from harness import Cistern, Origin, expect, expect_eq, expect_in, wait_for

# Debian 12 trafficserver 9.2.5+ds-0+deb12u4, /etc/trafficserver/logging.yaml
DEBIAN_LOGGING_YAML = r"""# Custom log configuration
#
# Documentation on logging:
#    https://docs.trafficserver.apache.org/en/9.0.x/admin-guide/logging/index.en.html
#
# Documentation on logging.yaml file format:
#    https://docs.trafficserver.apache.org/en/9.0.x/admin-guide/files/logging.yaml.en.html
#
# Example log configurations:
#    https://docs.trafficserver.apache.org/en/9.0.x/admin-guide/logging/examples.en.html


logging:
  formats:
    # WebTrends Enhanced Log Format.
    #
    # The following is compatible with the WebTrends Enhanced Log Format.
    # If you want to generate a log that can be parsed by WebTrends
    # reporting tools, simply create a log that uses this format.
    - name: welf
      format: |-
          id=firewall time="%<cqtd> %<cqtt>" fw=%<phn> pri=6 proto=%<cqus> duration=%<ttmsf> sent=%<psql> rcvd=%<cqhl> src=%<chi> dst=%<shi> dstname=%<shn> user=%<caun> op=%<cqhm> arg="%<cqup>" result=%<pssc> ref="%<{Referer}cqh>" agent="%<{user-agent}cqh>" cache=%<crc>
    # Squid Log Format with seconds resolution timestamp.
    # The following is the squid format but with a seconds-only timestamp
    # (cqts) instead of a seconds and milliseconds timestamp (cqtq).
    - name: squid_seconds_only_timestamp
      format: '%<cqts> %<ttms> %<chi> %<crc>/%<pssc> %<psql> %<cqhm> %<cquc> %<caun> %<phr>/%<shn> %<psct>'

    # Squid Log Format.
    - name: squid
      format: '%<cqtq> %<ttms> %<chi> %<crc>/%<pssc> %<psql> %<cqhm> %<cquc> %<caun> %<phr>/%<shn> %<psct>'

    # Common Log Format.
    - name: common
      format: '%<chi> - %<caun> [%<cqtn>] "%<cqtx>" %<pssc> %<pscl>'

    # Extended Log Format.
    - name: 'extended'
      format: '%<chi> - %<caun> [%<cqtn>] "%<cqtx>" %<pssc> %<pscl> %<sssc> %<sscl> %<cqcl> %<pqcl> %<cqhl> %<pshl> %<pqhl> %<sshl> %<tts>'

     # Extended2 Log Formats
    - name: "extended2"
      format: '%<chi> - %<caun> [%<cqtn>] "%<cqtx>" %<pssc> %<pscl> %<sssc> %<sscl> %<cqcl> %<pqcl> %<cqhl> %<pshl> %<pqhl> %<sshl> %<tts> %<phr> %<cfsc> %<pfsc> %<crc>'

  logs:
    - filename: squid
      format: squid
      mode: binary

# vim: set ft=yaml :
"""

BINARY_WARNING = r'mode: binary .* is written as ASCII'


def remap_for(o):
    return ["map http://m.test/ http://%s/" % o.authority]


log_lines = harness.log_lines


def raw(c, head):
    """Send head (bytes) on a new connection, read to EOF: (local port,
    response head bytes, body bytes)."""
    s = socket.create_connection(("127.0.0.1", c.port), timeout=10)
    port = s.getsockname()[1]
    s.sendall(head)
    data = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        data += d
    s.close()
    i = data.index(b"\r\n\r\n") + 4
    return port, data[:i], data[i:]


def header(head, name):
    vals = [ln.split(b":", 1)[1].strip().decode()
            for ln in head.split(b"\r\n")[1:]
            if ln.lower().startswith(name.lower().encode() + b":")]
    return ", ".join(vals) if vals else None


def test_debian_stock_logging_yaml_writes_squid_log():
    """The stock file loads (mode: binary warns and writes ASCII squid.log)
    and a miss then a hit give two squid lines with the right fields."""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1,
                                files={"logging.yaml": DEBIAN_LOGGING_YAML}) as c:
        c.expect_log(BINARY_WARNING)
        path = "/bytes/100/headers?Cache-Control=max-age%3D300&Content-Type=text/html%3B%20charset%3Dutf-8"
        req = ("GET %s HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n"
               % path).encode()
        t0 = time.time()
        _, h1, b1 = raw(c, req)
        _, h2, b2 = raw(c, req)
        t1 = time.time()
        lines = log_lines(c, "squid.log", 2)
        expect(not os.path.exists(os.path.join(c.log_dir, "access.log"))
               or os.path.getsize(os.path.join(c.log_dir, "access.log")) == 0,
               "access.log written although logging.yaml names the logs")
        rx = re.compile(r"^(\d+)\.(\d{3}) (\d+) (\S+) (\S+)/(\d{3}) (\d+) (\S+) "
                        r"(\S+) (\S+) (\S+)/(\S+) (\S+)$")
        ms = [rx.match(l) for l in lines]
        expect(all(ms), "squid lines: %r" % lines)
        url = "http://%s%s" % (o.authority, path)
        for m, crc, hier, host, head, body in (
                (ms[0], "TCP_MISS", "DIRECT", "127.0.0.1", h1, b1),
                (ms[1], "TCP_HIT", "NONE", "-", h2, b2)):
            expect(t0 - 1 <= int(m.group(1)) <= t1 + 1, "cqtq %s" % m.group(0))
            expect_eq(m.group(4), "127.0.0.1", "chi")
            expect_eq(m.group(5), crc, "crc")
            expect_eq(m.group(6), "200", "pssc")
            expect_eq(int(m.group(7)), len(head) + len(body), "psql")
            expect_eq(m.group(8), "GET", "cqhm")
            expect_eq(m.group(9), url, "cquc")
            expect_eq(m.group(10), "-", "caun")
            expect_eq(m.group(11), hier, "phr")
            expect_eq(m.group(12), host, "shn")
            expect_eq(m.group(13), "text/html", "psct")


# Every field, one per "name=value" pair, '|' between them.
ALL_FIELDS = ["cqts", "cqth", "cqtq", "cqtn", "cqtd", "cqtt", "ttms", "ttmsh",
              "ttmsf", "tts", "chi", "chih", "chp", "caun", "cqhm", "cqpv",
              "cqu", "pqu", "cquc", "cqup", "cqus", "cquuc", "cquup", "cquuh",
              "cqtx", "cqhl", "cqcl", "cqql", "cqssl", "cfsc", "cluc", "crc",
              "pssc", "psql", "pscl", "pshl", "psct", "prrp", "phr", "phn",
              "sssc", "sscl", "sshl", "ssql", "shn", "shi", "pqhl", "pqcl",
              "pqql", "pqsi", "pfsc"]
HDR_FIELDS = {"ua": "{User-Agent}cqh", "two": "{x-two}cqh",
              "none": "{X-None}cqh", "ssh": "{X-O}ssh",
              "psh": "{Cache-Status}psh", "pshnone": "{X-None}psh"}


def all_format():
    parts = ["%s=%%<%s>" % (f, f) for f in ALL_FIELDS]
    parts += ["%s=%%<%s>" % (k, v) for k, v in HDR_FIELDS.items()]
    return "|".join(parts)


def parse_all(line):
    return dict(p.split("=", 1) for p in line.split("|"))


def test_each_field_against_a_known_request():
    yaml = ("logging:\n  formats:\n    - name: all\n      format: '%s'\n"
            "  logs:\n    - filename: all\n      format: all\n" % all_format())
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1, files={"logging.yaml": yaml}) as c:
        path = ("/bytes/100/headers?Cache-Control=max-age%3D300&X-O=ov"
                "&Content-Type=text/plain%3B%20charset%3Dutf-8")
        head = ("GET %s HTTP/1.1\r\nHost: m.test\r\nUser-Agent: ua/1\r\n"
                "Referer: http://r.test/\r\nX-Two: a\r\nX-Two: b\r\n"
                "Connection: close\r\n\r\n" % path).encode()
        t0 = time.time()
        p1, h1, b1 = raw(c, head)
        p2, h2, b2 = raw(c, head)
        t1 = time.time()
        lines = log_lines(c, "all.log", 2)
        f1, f2 = parse_all(lines[0]), parse_all(lines[1])
        mapped = "http://%s%s" % (o.authority, path)
        for f, port, h, b in ((f1, p1, h1, b1), (f2, p2, h2, b2)):
            ts = int(f["cqts"])
            expect(int(t0) <= ts <= int(t1) + 1, "cqts %d in [%d, %d]" % (ts, t0, t1))
            expect_eq(f["cqth"], "%x" % ts, "cqth")
            expect(re.match(r"^%d\.\d{3}$" % ts, f["cqtq"]), "cqtq %s" % f["cqtq"])
            lt = time.localtime(ts)
            expect_eq(f["cqtd"], time.strftime("%Y-%m-%d", lt), "cqtd")
            expect_eq(f["cqtt"], time.strftime("%H:%M:%S", lt), "cqtt")
            expect_eq(f["cqtn"], time.strftime("%d/%b/%Y:%H:%M:%S ", lt)
                      + time.strftime("%z", lt), "cqtn")
            ms = int(f["ttms"])
            expect(0 <= ms <= (t1 - t0) * 1000 + 1000, "ttms %d" % ms)
            expect_eq(f["ttmsh"], "%x" % ms, "ttmsh")
            expect_eq(f["ttmsf"], "%d.%03d" % (ms // 1000, ms % 1000), "ttmsf")
            expect_eq(f["tts"], str(ms // 1000), "tts")
            expect_eq(f["chi"], "127.0.0.1", "chi")
            expect_eq(f["chih"], "7f000001", "chih")
            expect_eq(f["chp"], str(port), "chp")
            expect_eq(f["caun"], "-", "caun")
            expect_eq(f["cqhm"], "GET", "cqhm")
            expect_eq(f["cqpv"], "http/1.1", "cqpv")
            for k in ("cqu", "pqu", "cquc", "cluc"):
                expect_eq(f[k], mapped, k)
            expect_eq(f["cqup"], path, "cqup")
            expect_eq(f["cqus"], "http", "cqus")
            expect_eq(f["cquuc"], "http://m.test" + path, "cquuc")
            expect_eq(f["cquup"], path, "cquup")
            expect_eq(f["cquuh"], "m.test", "cquuh")
            expect_eq(f["cqtx"], "GET %s HTTP/1.1" % mapped, "cqtx")
            expect_eq(f["cqhl"], str(len(head)), "cqhl")
            expect_eq(f["cqcl"], "0", "cqcl")
            expect_eq(f["cqql"], str(len(head)), "cqql")
            expect_eq(f["cqssl"], "0", "cqssl")
            expect_eq(f["cfsc"], "FIN", "cfsc")
            expect_eq(f["pssc"], "200", "pssc")
            expect_eq(f["psql"], str(len(h) + len(b)), "psql")
            expect_eq(f["pscl"], str(len(b)), "pscl")
            expect_eq(f["pshl"], str(len(h)), "pshl")
            expect_eq(f["psct"], "text/plain", "psct")
            expect_eq(f["prrp"], "OK", "prrp")
            expect_eq(f["phn"], socket.gethostname(), "phn")
            expect_eq(f["pfsc"], "FIN", "pfsc")
            expect_eq(f["ua"], "ua/1", "{User-Agent}cqh")
            expect_eq(f["two"], "a, b", "{x-two}cqh (repeated: joined)")
            expect_eq(f["none"], "-", "{X-None}cqh (absent)")
            expect_eq(f["psh"], header(h, "Cache-Status"), "{Cache-Status}psh")
            expect_eq(f["pshnone"], "-", "{X-None}psh")
        # the miss went to the origin, the hit did not
        expect_eq(f1["crc"], "TCP_MISS", "crc (miss)")
        expect_eq(f2["crc"], "TCP_HIT", "crc (hit)")
        expect_eq(f1["phr"], "DIRECT", "phr (miss)")
        expect_eq(f2["phr"], "NONE", "phr (hit)")
        expect_eq(f1["sssc"], "200", "sssc (miss)")
        expect_eq(f2["sssc"], "000", "sssc (hit)")
        expect_eq(f1["sscl"], "100", "sscl (miss)")
        expect_eq(f2["sscl"], "0", "sscl (hit)")
        expect_eq(f1["shn"], "127.0.0.1", "shn (miss)")
        expect_eq(f2["shn"], "-", "shn (hit)")
        expect_eq(f1["shi"], "127.0.0.1", "shi (miss)")
        expect_eq(f2["shi"], "0", "shi (hit)")
        expect_eq(f1["pqsi"], "127.0.0.1", "pqsi (miss)")
        expect_eq(f2["pqsi"], "0", "pqsi (hit)")
        expect_eq(f1["ssh"], "ov", "{X-O}ssh (miss)")
        expect_eq(f2["ssh"], "-", "{X-O}ssh (hit: no origin response)")
        # the origin's request and response heads, as the origin saw them
        sshl, pqhl = int(f1["sshl"]), int(f1["pqhl"])
        expect(100 < sshl < 1000, "sshl %d" % sshl)
        expect_eq(f1["ssql"], str(sshl + 100), "ssql")
        expect(len("GET %s HTTP/1.1\r\n\r\n" % path) < pqhl < 2000, "pqhl %d" % pqhl)
        expect_eq(f1["pqcl"], "0", "pqcl")
        expect_eq(f1["pqql"], str(pqhl), "pqql")
        expect_eq(f2["sshl"], "0", "sshl (hit)")
        expect_eq(f2["pqhl"], "0", "pqhl (hit)")


def test_unknown_field_is_a_file_line_error():
    for fmt, why in (("%<chi> %<cqtq> %<bogus>", "unknown log field"),
                     ("%<chi> %<cqssv>", "an ATS log field Cistern does not record"),
                     ("%<chi> %<{X}cqh??chi>", "fallbacks"),
                     ("%<COUNT(*)>", "aggregate"),
                     ("%<cqup[0:8]>", "slices"),
                     ("%<chi", "%< without its closing >")):
        yaml = ("logging:\n  formats:\n    - name: f\n      format: '%s'\n"
                "  logs:\n    - filename: f\n      format: f\n" % fmt)
        r = harness.check_config(files={"logging.yaml": yaml})
        expect_eq(r.rc, 1, "%r: exit status" % fmt)
        expect(re.search(r"logging\.yaml:4: format \"f\": %s" % re.escape(why),
                         r.stderr), "%r: error:\n%s" % (fmt, r.stderr))
    yaml = ("logging:\n  filters:\n    - name: x\n      action: reject\n"
            "      condition: nosuch MATCH 1\n")
    r = harness.check_config(files={"logging.yaml": yaml})
    expect_eq(r.rc, 1, "filter on an unknown field: exit status")
    expect(re.search(r"logging\.yaml:5: filter \"x\": unknown log field", r.stderr),
           "filter error:\n" + r.stderr)
    yaml = ("logging:\n  formats:\n    - name: f\n      format: '%<chi>'\n"
            "  logs:\n    - filename: f\n      format: f\n      mode: ascii_pipe\n")
    r = harness.check_config(files={"logging.yaml": yaml})
    expect_eq(r.rc, 1, "ascii_pipe: exit status")
    expect(re.search(r"logging\.yaml:8: .*ascii_pipe is not supported", r.stderr),
           "ascii_pipe error:\n" + r.stderr)


def test_filters_reject_and_accept():
    yaml = """logging:
  formats:
    - name: f
      format: '%<cqhm> %<cqup> %<pssc>'
  filters:
    - name: nohead
      action: reject
      condition: cqhm MATCH HEAD
    - name: only404
      action: accept
      condition: pssc MATCH 404,410
    - name: local
      action: accept
      condition: chi MATCH 127.0.0.0-127.0.0.255
  logs:
    - filename: main
      format: f
      filters: [nohead, local]
    - filename: errors.txt
      format: f
      filters:
        - only404
"""
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=1, files={"logging.yaml": yaml}) as c:
        for method, p in (("GET", "/a"), ("HEAD", "/b"), ("GET", "/status/404/c"),
                          ("GET", "/d")):
            raw(c, ("%s %s HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n"
                    % (method, p)).encode())
        main = log_lines(c, "main.log", 3)
        errs = log_lines(c, "errors.txt", 1)
        time.sleep(1.2)     # anything late would be flushed by now
        main = log_lines(c, "main.log", 3)
        errs = log_lines(c, "errors.txt", 1)
        expect_eq(main, ["GET /a 200", "GET /status/404/c 404", "GET /d 200"],
                  "main.log (HEAD rejected)")
        expect_eq(errs, ["GET /status/404/c 404"], "errors.txt (only 404 accepted)")


def test_reopen_moves_custom_log():
    yaml = ("logging:\n  formats:\n    - name: f\n      format: '%<cqup>'\n"
            "  logs:\n    - filename: mine\n      format: f\n"
            "      header: '# cqup'\n")
    with Origin() as o, Cistern(storage=["cache 64M"], remap=remap_for(o),
                                workers=2, files={"logging.yaml": yaml}) as c:
        raw(c, b"GET /one HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n")
        lines = log_lines(c, "mine.log", 2)
        expect_eq(lines[0], "# cqup", "header line of a new file")
        os.rename(os.path.join(c.log_dir, "mine.log"),
                  os.path.join(c.log_dir, "mine.log.1"))
        r = harness.run_cistern(["-c", c.confdir, "-s", "reopen"])
        expect_eq(r.rc, 0, "-s reopen: %s" % r.stderr)
        wait_for(lambda: os.path.exists(os.path.join(c.log_dir, "mine.log")), 3,
                 what="a new mine.log")
        time.sleep(0.3)
        for i in range(6):
            raw(c, ("GET /two/%d HTTP/1.1\r\nHost: m.test\r\nConnection: close"
                     "\r\n\r\n" % i).encode())
        lines = log_lines(c, "mine.log", 7)
        expect_eq(lines[0], "# cqup", "header line of the reopened file")
        expect(all(l.startswith("/two/") for l in lines[1:]), "new mine.log: %r" % lines)
        with open(os.path.join(c.log_dir, "mine.log.1")) as f:
            old = f.read()
        expect("/two/" not in old, "a new line went to the renamed file")
        expect_in("/one", old, "the old file")


if __name__ == "__main__":
    harness.main()
