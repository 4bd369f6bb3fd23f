#!/usr/bin/env python3
"""t/test_ats_ports.py: ATS port descriptors and the PROXY protocol (issue 18).

proxy.config.http.server_ports in ATS's syntax: `PORT PORT:ipv6` is two
listeners on one port (IPv4, and IPv6 with IPV6_V6ONLY), `PORT:ipv6` alone
is IPv6 only, ip-in= binds one address, an exact duplicate and every ATS
item Cistern does not implement are errors with file:line.

`pp` ports take a PROXY protocol header (v1 text, v2 binary) first: the
address it carries is the client for ip_allow, the access log and
X-Forwarded-For; a header from a peer outside
proxy.config.http.proxy_protocol_allowlist, a malformed one, a missing one
or one too slow closes the connection with no answer and no access log
line.  Also under TLS (`ssl:pp`: the header comes before the handshake).
"""
import os
import re
import socket
import ssl
import struct
import time

import harness
from harness import access_lines
from harness import Cistern, Origin, check_config, curl, expect, expect_eq, \
    expect_in, parse_responses, wait_for

SP = "proxy.config.http.server_ports"
ALLOW = "proxy.config.http.proxy_protocol_allowlist"
V2SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def remap_for(o):
    return ["map http://m.test/ http://%s/" % o.authority]


def free_port():
    """A port free on both IPv4 and IPv6 (a dual-stack bind to port 0)."""
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def have_ipv6():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def connect(port, host="127.0.0.1", source=None, timeout=5.0):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s, timeout=5.0):
    """Read until the peer closes (True) or nothing comes for timeout."""
    data = b""
    s.settimeout(timeout)
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return data, True
            data += d
    except socket.timeout:
        return data, False
    except ConnectionResetError:
        return data, True


def exchange(port, data, source=None, host="127.0.0.1"):
    """Send data in one packet with Connection: close; (bytes, closed)."""
    s = connect(port, host, source)
    try:
        s.sendall(data)
        return read_all(s)
    finally:
        s.close()


def get(path="/echo", host="m.test"):
    return ("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
            % (path, host)).encode()


def v1(src, dst="127.0.0.1", sport=40000, dport=80, proto=None):
    proto = proto or ("TCP6" if ":" in src else "TCP4")
    return ("PROXY %s %s %s %d %d\r\n" % (proto, src, dst, sport, dport)).encode()


def v2(src=None, dst=None, sport=40000, dport=80, cmd=1, fam=None,
       tlvs=b"", ver=2):
    """A v2 header: PROXY (cmd 1) or LOCAL (0) over TCP, TLVs appended."""
    if src is None:
        body, famb = b"", 0x00
    elif ":" in src:
        body = (socket.inet_pton(socket.AF_INET6, src)
                + socket.inet_pton(socket.AF_INET6, dst or "::1")
                + struct.pack("!HH", sport, dport))
        famb = 0x21
    else:
        body = (socket.inet_aton(src) + socket.inet_aton(dst or "127.0.0.1")
                + struct.pack("!HH", sport, dport))
        famb = 0x11
    if fam is not None:
        famb = fam
    body += tlvs
    return V2SIG + bytes([(ver << 4) | cmd, famb]) + struct.pack("!H", len(body)) + body


def access_count(c):
    try:
        with open(os.path.join(c.log_dir, "access.log")) as f:
            return len(f.read().splitlines())
    except FileNotFoundError:
        return 0


def stat(c, name):
    r = curl([c.url("/_stats")])
    import json
    return int(json.loads(r.body)["global"][name])


def last_xff(o):
    req = o.requests()[-1]
    vals = [v for k, v in req["headers"] if k.lower() == "x-forwarded-for"]
    expect(vals, "no X-Forwarded-For at the origin: %r" % req)
    return vals[-1].split(",")[-1].strip()


# ---------------------------------------------------------------------------
# Port descriptors

def test_ipv4_and_ipv6_on_one_port():
    """ATS's stock `8080 8080:ipv6`: both families answer on the one port."""
    if not have_ipv6():
        raise harness.SkipTest("no IPv6 loopback")
    port = free_port()
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "%d %d:ipv6" % (port, port)},
                                remap=remap_for(o)) as c:
        expect_eq(c.ports, [port, port], "run/ports")
        for host in ("127.0.0.1", "::1"):
            data, closed = exchange(port, get("/x"), host=host)
            rs = parse_responses(data)
            expect(rs and rs[0].status == 200, "GET over %s: %r" % (host, data[:200]))
        lines = access_lines(c, 2)
        expect_eq(sorted(l.split()[0] for l in lines), ["127.0.0.1", "::1"],
                  "clients in the access log")


def test_ipv6_alone_is_ipv6_only():
    """`PORT:ipv6` alone listens on IPv6 only (IPV6_V6ONLY): an IPv4 client
    is refused by the kernel, not served through a mapped address."""
    if not have_ipv6():
        raise harness.SkipTest("no IPv6 loopback")
    port = free_port()
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 %d:ipv6" % port},
                                remap=remap_for(o)) as c:
        expect_eq(c.ports[1], port, "second port")
        data, _ = exchange(port, get("/x"), host="::1")
        expect_eq(parse_responses(data)[0].status, 200, "IPv6 GET")
        try:
            s = connect(port, "127.0.0.1", timeout=2)
            s.close()
            harness.fail("IPv4 connect to an ipv6-only port succeeded")
        except (ConnectionRefusedError, OSError):
            pass


def test_ip_in_binds_one_address():
    """ip-in=127.0.0.1: served on 127.0.0.1, nothing listens on 127.0.0.2."""
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "ip-in=127.0.0.1:0"},
                                remap=remap_for(o)) as c:
        data, _ = exchange(c.port, get("/x"))
        expect_eq(parse_responses(data)[0].status, 200, "GET on 127.0.0.1")
        try:
            s = connect(c.port, "127.0.0.2", timeout=2)
            s.close()
            harness.fail("127.0.0.2 connected to an ip-in=127.0.0.1 port")
        except OSError:
            pass


def test_overlapping_listeners():
    """`P ip-in=127.0.0.1:P:pp`: two listeners on one port that overlap
    without being the same (the probes run before any bind, so neither
    takes the other for a foreign server); the kernel gives 127.0.0.1's
    connections to the specific one (a pp port here) and the rest to the
    wildcard one."""
    port = free_port()
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "%d ip-in=127.0.0.1:%d:pp" % (port, port)},
                                remap=remap_for(o)) as c:
        expect_eq(c.ports, [port, port], "run/ports")
        data, _ = exchange(port, get("/x"), host="127.0.0.2")
        expect_eq(parse_responses(data)[0].status, 200, "plain GET to 127.0.0.2")
        data, _ = exchange(port, v1("203.0.113.1") + get(), host="127.0.0.1")
        expect_eq(parse_responses(data)[0].status, 200, "PROXY + GET to 127.0.0.1")
        expect_eq(last_xff(o), "203.0.113.1", "X-Forwarded-For")
        data, closed = exchange(port, get("/x"), host="127.0.0.1")
        expect(data == b"" and closed, "plain GET to the pp address: %r" % data[:100])


def test_descriptor_errors():
    """An exact duplicate, every ATS item Cistern does not do, and proto=
    other than HTTP/1.x: errors with file:line naming the descriptor.  What
    ATS writes that Cistern does passes `cistern -t`."""
    with harness.Collector() as col:
        _descriptor_cases(col)


def _descriptor_cases(col):
    bad = [
        ("8080 8080", r'"8080": port 8080 \(IPv4\) is listed twice'),
        ("8080:ipv6 8080:ipv6", r'port 8080 \(IPv6\) is listed twice'),
        ("ip-in=127.0.0.1:8080 8080:ip-in=127.0.0.1", r"is listed twice"),
        ("8080:tr-full", r'"8080:tr-full": tr-full: transparent proxying is not supported'),
        ("8080:tr-in", r"tr-in: transparent proxying is not supported"),
        ("8080:tr-out", r"tr-out: transparent proxying is not supported"),
        ("8080:tr-pass", r"tr-pass: transparent pass-through is not supported"),
        ("8080:blind", r"blind: blind tunnel .* not supported"),
        ("8080:ip-out=10.0.0.1", r"ip-out=10\.0\.0\.1: a per-port outbound address is not supported"),
        ("8080:ip-resolve=ipv6", r"ip-resolve=ipv6: per-port resolution order is not supported"),
        ("8080:compress", r"compress: compressed ports are not supported"),
        ("8080:mptcp", r"mptcp: Multipath TCP is not supported"),
        ("8080:quic", r"quic: QUIC \(HTTP/3\) is not supported"),
        ("8080:allow-plain", r"allow-plain: .* not supported"),
        ("8080:proto=spdy", r"proto=spdy: protocol not supported"),
        ("8080:frob", r'"8080:frob": unknown port option "frob"'),
        ("ipv6:ip-in=127.0.0.1:8080", r"the ip-in= address is not IPv6"),
        ("ip-in=::1:8080", r"ip-in= needs an address"),
        ("ipv6", r"has no port number"),
    ]
    for value, rx in bad:
        with col.case(value):
            r = check_config(records={SP: value})
            expect(r.rc != 0, "`%s` accepted: %r" % (value, r))
            expect(re.search(r"records\.config:\d+: proxy\.config\.http\.server_ports: .*" + rx,
                             r.stderr), "`%s`: no /%s/ in %r" % (value, rx, r.stderr))
    good = ["8080 8080:ipv6", "8080:ipv4", "IPV6:8080", "8080:proto=http",
            "8080:proto=http/1.1", "8080:proto=http/1.0;http/1.1",
            "8080:proto=http2", "8080:proto=h2c", "8080:proto=http;http2",
            "ip-in=127.0.0.1:8080", "ip-in=[::1]:8080", "8080:pp",
            "8080:pp 8080:ipv6:pp", "ip-in=127.0.0.1:8080 8080",
            "8080:ip-in=[::1]:ipv6"]
    for value in good:
        with col.case(value):
            r = check_config(records={SP: value, ALLOW: "127.0.0.1"})
            expect_eq(r.rc, 0, "`%s`: %r" % (value, r))
    with col.case("a pp port without an allowlist"):
        r = check_config(records={SP: "8080:pp"})
        expect(r.rc != 0 and "names no peer" in r.stderr,
               "a pp port trusting every peer implicitly was accepted: %r" % r)
    for value, rx in [("10.0.0.1/40", r"proxy_protocol_allowlist: .*10\.0\.0\.1/40"),
                      ("10.0.0.x", r"proxy_protocol_allowlist: ")]:
        with col.case("allowlist " + value):
            r = check_config(records={ALLOW: value})
            expect(r.rc != 0 and re.search(r"records\.config:\d+: proxy\.config\.http\." + rx,
                                           r.stderr),
                   "allowlist %s: %r" % (value, r))


# ---------------------------------------------------------------------------
# The PROXY protocol

def test_pp_v1_sets_client():
    """v1 TCP4 and TCP6: the carried address is the access log's client and
    the origin's X-Forwarded-For; the request rides in the same packet as
    the header (pipelined bytes right behind it are served)."""
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:pp"}, remap=remap_for(o),
                                workers=1) as c:
        data, closed = exchange(c.ports[1], v1("203.0.113.7") + get())
        expect_eq(parse_responses(data)[0].status, 200, "v1 TCP4 GET: %r" % data[:200])
        expect_eq(last_xff(o), "203.0.113.7", "X-Forwarded-For")
        data, closed = exchange(c.ports[1], v1("2001:db8::7", "::1") + get())
        expect_eq(parse_responses(data)[0].status, 200, "v1 TCP6 GET")
        expect_eq(last_xff(o), "2001:db8::7", "X-Forwarded-For (v6)")
        # two pipelined requests in the header's packet
        s = connect(c.ports[1])
        s.sendall(v1("198.51.100.9") + b"GET /echo HTTP/1.1\r\nHost: m.test\r\n\r\n" + get())
        data, closed = read_all(s)
        s.close()
        rs = parse_responses(data)
        expect_eq([r.status for r in rs], [200, 200], "pipelined behind the header")
        lines = access_lines(c, 4)
        expect_eq([l.split()[0] for l in lines],
                  ["203.0.113.7", "2001:db8::7", "198.51.100.9", "198.51.100.9"],
                  "access log clients")


def test_pp_v2_sets_client():
    """v2 PROXY over TCP4 (with TLVs skipped) and TCP6 sets the client; LOCAL
    (a balancer's health check) and v1 UNKNOWN keep the real peer."""
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:pp"}, remap=remap_for(o),
                                workers=1) as c:
        tlv = b"\x04\x00\x05hello" + b"\xea\x00\x10" + b"v" * 16
        data, _ = exchange(c.ports[1], v2("192.0.2.44", tlvs=tlv) + get())
        expect_eq(parse_responses(data)[0].status, 200, "v2 TCP4 GET: %r" % data[:200])
        expect_eq(last_xff(o), "192.0.2.44", "X-Forwarded-For")
        data, _ = exchange(c.ports[1], v2("2001:db8::44") + get())
        expect_eq(parse_responses(data)[0].status, 200, "v2 TCP6 GET")
        expect_eq(last_xff(o), "2001:db8::44", "X-Forwarded-For (v6)")
        data, _ = exchange(c.ports[1], v2("192.0.2.45", cmd=0) + get())
        expect_eq(parse_responses(data)[0].status, 200, "v2 LOCAL GET")
        expect_eq(last_xff(o), "127.0.0.1", "X-Forwarded-For after LOCAL")
        data, _ = exchange(c.ports[1], b"PROXY UNKNOWN\r\n" + get())
        expect_eq(parse_responses(data)[0].status, 200, "v1 UNKNOWN GET")
        expect_eq(last_xff(o), "127.0.0.1", "X-Forwarded-For after UNKNOWN")
        lines = access_lines(c, 4)
        expect_eq([l.split()[0] for l in lines],
                  ["192.0.2.44", "2001:db8::44", "127.0.0.1", "127.0.0.1"],
                  "access log clients")


def test_pp_address_drives_ip_allow():
    """ip_allow.config sees the carried address: a rule allowing only
    203.0.113.7 serves it and refuses 203.0.113.8 (403), though both come
    from the same peer.  proxy.config.acl.subjects PEER (ATS's default)
    changes nothing: in ATS 9 the PROXY address has replaced the peer's
    before any ACL runs."""
    ip_allow = ["src_ip=203.0.113.7 action=ip_allow method=ALL",
                "src_ip=0.0.0.0-255.255.255.255 action=ip_deny method=ALL",
                "src_ip=::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff action=ip_deny method=ALL"]
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:pp", "proxy.config.acl.subjects": "PEER"},
                                remap=remap_for(o), ip_allow=ip_allow, workers=1) as c:
        data, _ = exchange(c.ports[1], v1("203.0.113.7") + get())
        expect_eq(parse_responses(data)[0].status, 200, "allowed address")
        data, _ = exchange(c.ports[1], v2("203.0.113.8") + get())
        expect_eq(parse_responses(data)[0].status, 403, "denied address")
        lines = access_lines(c, 2)
        expect_eq([(l.split()[0], l.split()[8]) for l in lines],
                  [("203.0.113.7", "200"), ("203.0.113.8", "403")],
                  "access log")


def test_pp_allowlist():
    """Only peers in proxy_protocol_allowlist may send the header: from
    127.0.0.1 (not listed) a valid header gets a close, no answer, no
    access log line, a counter; from 127.0.0.2 (listed) it is served."""
    with Origin() as o, Cistern(records={SP: "0 0:pp", ALLOW: "10.1.1.1, 127.0.0.2/32"},
                                remap=remap_for(o), workers=1) as c:
        pp = c.ports[1]
        data, closed = exchange(pp, v1("203.0.113.7") + get())
        expect_eq(data, b"", "answer to a peer not allowed")
        expect(closed, "connection from a peer not allowed left open")
        data, closed = exchange(pp, v1("203.0.113.9") + get(), source="127.0.0.2")
        expect_eq(parse_responses(data)[0].status, 200, "allowed peer: %r" % data[:200])
        expect_eq(last_xff(o), "203.0.113.9", "X-Forwarded-For")
        lines = access_lines(c, 1)
        time.sleep(1.5)     # the workers flush once a second
        lines = access_lines(c, 1)
        expect_eq([l.split()[0] for l in lines], ["203.0.113.9"], "access log")
        expect(stat(c, "proxy.process.cistern.proxy_protocol_refused") >= 1,
               "proxy_protocol_refused counter")


def test_pp_malformed_or_missing_closes():
    """A malformed v1 or v2 header, or none at all, on a pp port: the
    connection is closed with no answer and no access log line."""
    cases = [
        ("no header", get()),
        ("v1 LF only", b"PROXY TCP4 203.0.113.7 127.0.0.1 1 2\n" + get()),
        ("v1 TCP5", b"PROXY TCP5 203.0.113.7 127.0.0.1 1 2\r\n" + get()),
        ("v1 bad address", b"PROXY TCP4 203.0.113.999 127.0.0.1 1 2\r\n" + get()),
        ("v1 v6 in TCP4", b"PROXY TCP4 ::1 ::1 1 2\r\n" + get()),
        ("v1 bad port", b"PROXY TCP4 203.0.113.7 127.0.0.1 1 70000\r\n" + get()),
        ("v1 two spaces", b"PROXY TCP4  203.0.113.7 127.0.0.1 1 2\r\n" + get()),
        ("v1 missing field", b"PROXY TCP4 203.0.113.7 127.0.0.1 1\r\n" + get()),
        ("v1 too long", b"PROXY UNKNOWN " + b"x" * 120 + b"\r\n" + get()),
        ("v1 lowercase", b"proxy TCP4 203.0.113.7 127.0.0.1 1 2\r\n" + get()),
        ("v2 bad signature", V2SIG[:-1] + b"X" + v2("192.0.2.1")[12:] + get()),
        ("v2 version 1", v2("192.0.2.1", ver=1) + get()),
        ("v2 command 2", v2("192.0.2.1", cmd=2) + get()),
        ("v2 UDP", v2("192.0.2.1", fam=0x12) + get()),
        ("v2 short IPv4", V2SIG + b"\x21\x11\x00\x04" + b"\x01\x02\x03\x04" + get()),
        ("v2 too long", V2SIG + b"\x21\x11\xff\xff" + b"\x00" * 100),
    ]
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:pp"}, remap=remap_for(o),
                                workers=1) as c, \
            harness.Collector() as col:
        for name, data in cases:
            with col.case(name):
                got, closed = exchange(c.ports[1], data)
                expect_eq(got, b"", "answer")
                expect(closed, "left open")
        time.sleep(1.5)
        expect_eq(access_count(c), 0, "access log lines")
        expect_eq(len(o.requests()), 0, "requests at the origin")
        expect(stat(c, "proxy.process.cistern.proxy_protocol_refused") >= len(cases),
               "proxy_protocol_refused counter")


@harness.timeout(120)
def test_pp_slow_header_cut():
    """A PROXY header dripped one byte a second is cut at the accept
    timeout (2 s here) counted from accept: each byte does not restart it."""
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:pp",
                                         "proxy.config.http.accept_no_activity_timeout": 2},
                                remap=remap_for(o)) as c:
        hdr = v1("203.0.113.7")
        s = connect(c.ports[1])
        t0 = time.monotonic()
        closed_at = None
        got = b""
        for i in range(len(hdr)):
            try:
                s.sendall(hdr[i:i + 1])
            except OSError:
                closed_at = time.monotonic() - t0
                break
            d, closed = read_all(s, 1.0)
            got += d
            if closed:
                closed_at = time.monotonic() - t0
                break
        s.close()
        expect(closed_at is not None, "a dripped header was never cut")
        expect(closed_at < 8, "cut after %.1f s (timeout 2 s)" % closed_at)
        expect_eq(got, b"", "answer")
        # a whole header in time is still served
        data, _ = exchange(c.ports[1], hdr + get())
        expect_eq(parse_responses(data)[0].status, 200, "prompt header")


def test_reload_cannot_turn_pp_on():
    """Adding :pp by a reload needs a restart: the reload says so and the
    port keeps serving plain HTTP (a half-applied pp port would drop every
    client, or take headers it was not told to)."""
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0"}, remap=remap_for(o)) as c:
        c.write_file("records.config", open(os.path.join(c.confdir, "records.config"))
                     .read().replace("server_ports STRING 0", "server_ports STRING 0:pp"))
        c.reload(wait_log=r"\[warn\] .*server_ports changed: needs a restart")
        c.expect_log(r"server_ports changed: needs a restart")
        data, _ = exchange(c.port, get("/x"))
        expect_eq(parse_responses(data)[0].status, 200, "plain GET after the reload")


def test_pp_ssl():
    """`ssl:pp`: the PROXY header comes before the TLS handshake; the
    request inside TLS is served with the carried client."""
    import test_tls
    files = test_tls.tls_files("www.test")
    files["ssl_multicert.config"] = ("dest_ip=* ssl_cert_name=www.test.pem "
                                     "ssl_key_name=www.test.key\n")
    with Origin() as o, Cistern(records={ALLOW: "127.0.0.0/8", SP: "0 0:ssl:pp"}, files=files, workers=1,
                                remap=["map https://www.test/ http://%s/" % o.authority]) as c:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        for hdr, client in ((v1("203.0.113.70"), "203.0.113.70"),
                            (v2("2001:db8::70"), "2001:db8::70")):
            s = connect(c.ports[1])
            s.sendall(hdr)
            t = ctx.wrap_socket(s, server_hostname="www.test")
            t.sendall(get("/echo", "www.test"))
            data, _ = read_all(t)
            t.close()
            expect_eq(parse_responses(data)[0].status, 200, "GET over ssl:pp: %r" % data[:200])
            expect_eq(last_xff(o), client, "X-Forwarded-For")
        # TLS without the header: closed, never a handshake
        s = connect(c.ports[1])
        try:
            t = ctx.wrap_socket(s, server_hostname="www.test")
            t.close()
            harness.fail("a TLS handshake without a PROXY header succeeded")
        except (ssl.SSLError, OSError):
            pass
        finally:
            s.close()
        lines = access_lines(c, 2)
        expect_eq([l.split()[0] for l in lines], ["203.0.113.70", "2001:db8::70"],
                  "access log")


if __name__ == "__main__":
    harness.main()
