#!/usr/bin/env python3
"""End-to-end tests of TLS (issue 10): HTTPS listeners with SNI
certificates, TLS to https origins, certificates reloaded on SIGHUP,
protocol versions and session resumption across workers.

Every certificate is made here with `openssl req` in a temporary
directory; curl checks ours with --cacert, openssl s_client shows what a
client without SNI gets, and a small python ssl origin plays the https
origin."""

import http.server
import os
import re
import shutil
import signal
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading

import harness
from harness import Cistern, Origin, curl, expect, expect_eq, expect_in, \
    run_cistern, wait_for

TMP = tempfile.mkdtemp(prefix="cistern-tls-")


def sh(args, inp=None, timeout=30):
    p = subprocess.run(args, input=inp, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p


def openssl_ok(args):
    p = sh(["openssl"] + args)
    if p.returncode != 0:
        raise harness.HarnessError("openssl %s: %s" % (" ".join(args),
                                                        p.stderr.decode()))


def _key_args(kfile):
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", kfile]


def self_signed(name, sans=None, days=30):
    """A self-signed certificate for name; returns (cert path, key path)."""
    c = os.path.join(TMP, name + ".pem")
    k = os.path.join(TMP, name + ".key")
    if not os.path.exists(c):
        sans = sans or [name]
        openssl_ok(["req", "-x509", "-days", str(days), "-subj", "/CN=" + name,
                    "-addext", "subjectAltName=" + ",".join(
                        ("IP:" if re.match(r"^[\d.]+$", s) else "DNS:") + s
                        for s in sans)] + _key_args(k) + ["-out", c])
    return c, k


def make_ca():
    c = os.path.join(TMP, "ca.pem")
    k = os.path.join(TMP, "ca.key")
    if not os.path.exists(c):
        openssl_ok(["req", "-x509", "-days", "30", "-subj", "/CN=Cistern Test CA",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
                   + _key_args(k) + ["-out", c])
    return c, k


def ca_signed(name, sans):
    ca, cak = make_ca()
    c = os.path.join(TMP, name + ".pem")
    k = os.path.join(TMP, name + ".key")
    if not os.path.exists(c):
        csr = os.path.join(TMP, name + ".csr")
        ext = os.path.join(TMP, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=" + ",".join(
                ("IP:" if re.match(r"^[\d.]+$", s) else "DNS:") + s
                for s in sans) + "\n")
        openssl_ok(["req", "-new", "-subj", "/CN=" + name] + _key_args(k)
                   + ["-out", csr])
        openssl_ok(["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cak,
                    "-CAcreateserial", "-days", "30", "-extfile", ext,
                    "-out", c])
    return c, k


def read(p):
    with open(p) as f:
        return f.read()


def tls_files(*names):
    """{file: content} for the config dir: NAME.pem / NAME.key."""
    out = {}
    for n in names:
        c, k = self_signed(n)
        out[n + ".pem"] = read(c)
        out[n + ".key"] = read(k)
    return out


def tls_records(extra=None):
    r = {"proxy.config.http.server_ports": "0 0:ssl"}
    r.update(extra or {})
    return r


def tls_port(c):
    return c.ports[1]


def https(c, path, name="www.test", ca=None, extra=None):
    ca = ca or self_signed(name)[0]
    # Host without the port: remap rules name https://NAME/ (port 443)
    return curl(["--cacert", ca, "--resolve", "%s:%d:127.0.0.1" % (name, tls_port(c)),
                 "-H", "Host: " + name,
                 "https://%s:%d%s" % (name, tls_port(c), path)] + (extra or []))


def s_client(port, args, inp=b"", timeout=20):
    p = sh(["openssl", "s_client", "-connect", "127.0.0.1:%d" % port]
           + args, inp=inp, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode("latin-1")


def subject_of(out):
    m = re.search(r"subject=\s*(.*)", out)
    return m.group(1).strip() if m else None


def stats(c):
    r = curl([c.url("/_stats")])
    import json
    return json.loads(r.body)["global"]


# ---------------------------------------------------------------------------

def test_https_miss_then_hit():
    """curl --cacert through the TLS port: a miss goes to the origin, the
    second request is a hit; the plain port keeps working; a 200 KiB body
    (many records) arrives whole; handshakes are counted."""
    with Origin() as o:
        with Cistern(records=tls_records(),
                     remap=["map https://www.test/ http://%s/" % o.authority,
                            "map http://www.test/ http://%s/" % o.authority],
                     storage="cache 64M",
                     files=dict(tls_files("www.test"), **{
                         "ssl_multicert.config":
                         "dest_ip=* ssl_cert_name=www.test.pem ssl_key_name=www.test.key\n"})) as c:
            p = "/bytes/1024/headers?Cache-Control=max-age%3D60"
            r1 = https(c, p)
            expect_eq((r1.rc, r1.status), (0, 200), "first https request (%s)" % r1.stderr)
            expect_eq(r1.body, harness.pattern(1024), "body")
            r2 = https(c, p)
            expect_eq(r2.status, 200, "second https request")
            expect_eq(r2.body, harness.pattern(1024), "hit body")
            expect_eq(r2.header("X-Origin-Seq"), r1.header("X-Origin-Seq"),
                      "X-Origin-Seq (the second was not a hit)")
            expect_in("hit", r2.header("Cache-Status") or "", "Cache-Status")
            big = https(c, "/bytes/204800/headers?Cache-Control=max-age%3D60")
            expect_eq(big.body, harness.pattern(204800), "200 KiB body over TLS")
            big2 = https(c, "/bytes/204800/headers?Cache-Control=max-age%3D60")
            expect_eq(big2.body, harness.pattern(204800), "200 KiB hit over TLS")
            r = curl([c.url(p), "-H", "Host: www.test"])
            expect_eq(r.status, 200, "plain port")
            # keep-alive: several requests on one TLS connection
            ca = self_signed("www.test")[0]
            url = "https://www.test:%d%s" % (tls_port(c), p)
            r = curl(["--cacert", ca, "--resolve", "www.test:%d:127.0.0.1" % tls_port(c),
                      "-H", "Host: www.test", url, url, url])
            expect_eq((r.rc, r.status), (0, 200), "keep-alive over TLS")
            st = stats(c)
            expect(int(st["proxy.process.ssl.total_success_handshake_count_in"]) >= 5,
                   "handshakes counted: %r" % st)


def test_sni_two_certificates_and_default():
    """Two names, two certificates: each name gets its own; a client without
    SNI (and one with an unknown name) gets the dest_ip=* certificate."""
    files = tls_files("one.test", "two.test")
    files["ssl_multicert.config"] = (
        "ssl_cert_name=one.test.pem ssl_key_name=one.test.key\n"
        "dest_ip=* ssl_cert_name=two.test.pem ssl_key_name=two.test.key\n")
    with Origin() as o:
        with Cistern(records=tls_records(),
                     remap=["map https://one.test/ http://%s/" % o.authority,
                            "map https://two.test/ http://%s/" % o.authority],
                     files=files) as c:
            for n in ("one.test", "two.test"):
                r = https(c, "/bytes/10", name=n)
                expect_eq((r.rc, r.status), (0, 200), "%s over TLS: %s" % (n, r.stderr))
            rc, out = s_client(tls_port(c), ["-noservername"], b"")
            expect_in("CN = two.test", subject_of(out) or out, "subject without SNI")
            rc, out = s_client(tls_port(c), ["-servername", "one.test"], b"")
            expect_in("CN = one.test", subject_of(out) or out, "subject for one.test")
            rc, out = s_client(tls_port(c), ["-servername", "other.test"], b"")
            expect_in("CN = two.test", subject_of(out) or out, "subject for an unknown name")


def test_wildcard_and_first_line_default():
    """A wildcard certificate covers one label; without dest_ip=* the first
    line is the default."""
    c1, k1 = self_signed("wild", ["*.w.test"])
    c2, k2 = self_signed("plain.test")
    files = {"wild.pem": read(c1), "wild.key": read(k1),
             "plain.pem": read(c2), "plain.key": read(k2),
             "ssl_multicert.config": "ssl_cert_name=plain.pem ssl_key_name=plain.key\n"
                                     "ssl_cert_name=wild.pem ssl_key_name=wild.key\n"}
    with Cistern(records=tls_records(), files=files) as c:
        rc, out = s_client(tls_port(c), ["-servername", "a.w.test"], b"")
        expect_in("CN = wild", subject_of(out) or out, "a.w.test")
        rc, out = s_client(tls_port(c), ["-servername", "a.b.w.test"], b"")
        expect_in("CN = plain.test", subject_of(out) or out, "a.b.w.test (two labels)")
        rc, out = s_client(tls_port(c), ["-noservername"], b"")
        expect_in("CN = plain.test", subject_of(out) or out, "no SNI")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    count = 0

    def do_GET(self):
        _Handler.count += 1
        body = b"secure origin %d\n" % _Handler.count
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "max-age=60")
        self.send_header("X-Host", self.headers.get("Host", ""))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class TlsOrigin:
    """An https origin in a thread: python's ssl around http.server."""

    def __init__(self, cert, key):
        class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
        self.srv = S(("127.0.0.1", 0), _Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.srv.socket = ctx.wrap_socket(self.srv.socket, server_side=True)
        self.port = self.srv.server_address[1]
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.srv.shutdown()
        self.srv.server_close()


def test_https_origin_verified_by_make_ca():
    """An https origin whose certificate the test CA signed: accepted with
    proxy.config.ssl.client.CA.cert.filename, Host/SNI carry the name,
    the connection is pooled; a self-signed origin is refused with a 502
    and a log line."""
    oc, ok = ca_signed("origin.test", ["origin.test", "localhost"])
    sc, sk = self_signed("selfsigned.test", ["localhost"])
    ca = make_ca()[0]
    with TlsOrigin(oc, ok) as good, TlsOrigin(sc, sk) as bad:
        with Cistern(records={"proxy.config.ssl.client.CA.cert.filename": ca},
                     workers=1,
                     remap=["map http://good.test/ https://localhost:%d/" % good.port,
                            "map http://bad.test/ https://localhost:%d/" % bad.port]) as c:
            c.expect_log(r"TLS handshake with origin localhost:\d+ failed")
            r = curl([c.url("/a"), "-H", "Host: good.test"])
            expect_eq(r.status, 200, "verified https origin")
            expect_in(b"secure origin", r.body, "body")
            expect_eq(r.header("X-Host"), "localhost:%d" % good.port, "Host sent")
            r = curl([c.url("/b"), "-H", "Host: good.test"])
            expect_eq(r.status, 200, "second request (pooled connection)")
            r = curl([c.url("/a"), "-H", "Host: bad.test"])
            expect_eq(r.status, 502, "self-signed origin")
            c.wait_log(r"\[warn\].*TLS handshake with origin localhost:%d failed: "
                       r".*self.signed" % bad.port, 5)
            st = stats(c)
            expect(int(st["proxy.process.cistern.origin_connections_reused"]) >= 1,
                   "https origin connection reused: %r" % st)
            expect(int(st["proxy.process.ssl.total_handshake_errors_out"]) >= 1,
                   "origin handshake failure counted")
        # the system store alone does not know the test CA: refused
        with Cistern(remap=["map http://good.test/ https://localhost:%d/" % good.port]) as c:
            c.expect_log(r"TLS handshake with origin")
            r = curl([c.url("/a"), "-H", "Host: good.test"])
            expect_eq(r.status, 502, "test CA without the CA file")
        # PERMISSIVE: logged, served
        with Cistern(records={"proxy.config.ssl.client.verify.server.policy": "PERMISSIVE"},
                     remap=["map http://bad.test/ https://localhost:%d/" % bad.port]) as c:
            r = curl([c.url("/p"), "-H", "Host: bad.test"])
            expect_eq(r.status, 200, "PERMISSIVE policy")
            c.wait_log(r"\[warn\].*certificate not verified", 5)


def reload_status(c):
    try:
        with open(os.path.join(c.run_dir, "reload.status")) as f:
            line = f.readline().rstrip("\n")
    except FileNotFoundError:
        return 0, None, ""
    m = re.match(r"(\d+) (ok|failed) ?(.*)$", line)
    return int(m.group(1)), m.group(2) == "ok", m.group(3)


def hup(c):
    seq0 = reload_status(c)[0]
    c.signal(signal.SIGHUP)
    st = wait_for(lambda: (lambda s: s if s[0] != seq0 else None)(reload_status(c)),
                  15, what="reload.status to change")
    return st[1], st[2]


def test_reload_new_certificate_and_broken_key():
    """SIGHUP with a new certificate: new connections get it.  A broken
    key then fails the reload with file:line (-s reload exits non-zero,
    reload.status says failed) and the last good certificate keeps
    serving."""
    a_c, a_k = self_signed("reload-a", ["r.test"])
    b_c, b_k = self_signed("reload-b", ["r.test"])
    mc = "dest_ip=* ssl_cert_name=site.pem ssl_key_name=site.key\n"
    with Cistern(records=tls_records(),
                 files={"site.pem": read(a_c), "site.key": read(a_k),
                        "ssl_multicert.config": mc}) as c:
        c.expect_log(r"ssl_multicert\.config:1: ")
        c.expect_log(r"reload failed")
        rc, out = s_client(tls_port(c), ["-servername", "r.test"])
        expect_in("CN = reload-a", subject_of(out) or out, "before reload")
        c.write_file("site.pem", read(b_c))
        c.write_file("site.key", read(b_k))
        ok, msg = hup(c)
        expect(ok, "reload with a new certificate: %s" % msg)
        def new_cert():
            rc, out = s_client(tls_port(c), ["-servername", "r.test"])
            return "CN = reload-b" in (subject_of(out) or "")
        wait_for(new_cert, 10, what="the new certificate on new connections")

        c.write_file("site.key", "-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")
        r = run_cistern(["-c", c.confdir, "-s", "reload"], 20)
        expect(r.rc != 0, "-s reload with a broken key exited 0: %r" % r)
        expect(re.search(r"ssl_multicert\.config:1: ", r.stderr),
               "-s reload does not show ssl_multicert.config:1: %r" % r.stderr)
        ok, msg = hup(c)
        expect(not ok, "a broken key reloaded")
        expect(re.search(r"ssl_multicert\.config:1: ", msg), "reload.status: %r" % msg)
        rc, out = s_client(tls_port(c), ["-servername", "r.test"])
        expect_in("CN = reload-b", subject_of(out) or out, "after the failed reload")
        # a key that does not match its certificate
        c.write_file("site.key", read(a_k))
        r = run_cistern(["-c", c.confdir, "-t"], 20)
        expect(r.rc != 0 and re.search(r"ssl_multicert\.config:1: .*(does not match|mismatch)",
                                       r.stderr), "-t with a mismatched key: %r" % r)


def test_check_config_errors():
    """cistern -t: a missing certificate and an unknown key are errors with
    file:line; an ssl port without ssl_multicert.config is an error; an
    expired certificate is only a warning."""
    r = harness.check_config(records=tls_records(), files={
        "ssl_multicert.config": "ssl_cert_name=nope.pem\nfoo=bar ssl_cert_name=x.pem\n"})
    expect(r.rc != 0, "-t accepted a missing certificate")
    expect(re.search(r"ssl_multicert\.config:1: ssl_cert_name .*nope\.pem: No such file",
                     r.stderr), "missing certificate message: %r" % r.stderr)
    expect(re.search(r"ssl_multicert\.config:2: unknown key \"foo\"", r.stderr),
           "unknown key message: %r" % r.stderr)
    r = harness.check_config(records=tls_records())
    expect(r.rc != 0 and "ssl_multicert.config" in r.stderr,
           "ssl port without ssl_multicert.config: %r" % r)
    # expired: made with a start date in the past
    c = os.path.join(TMP, "old.pem")
    k = os.path.join(TMP, "old.key")
    _old_cert(c, k)
    r = harness.check_config(records=tls_records(), files={
        "old.pem": read(c), "old.key": read(k),
        "ssl_multicert.config": "ssl_cert_name=old.pem ssl_key_name=old.key\n"})
    expect(r.rc == 0, "-t refused an expired certificate: %r" % r)
    expect(re.search(r"ssl_multicert\.config:1: .*expired", r.stderr + r.stdout),
           "no expiry warning: %r" % r)


def _old_cert(c, k):
    """An expired certificate (OpenSSL 3.0's req cannot back-date one)."""
    try:
        import datetime
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise harness.SkipTest("cannot make an expired certificate here")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "old.test")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(datetime.datetime(2020, 1, 1))
            .not_valid_after(datetime.datetime(2020, 2, 1))
            .sign(key, hashes.SHA256()))
    with open(c, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(k, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))


def test_tls11_refused_unless_enabled():
    """OpenSSL 3 clients refuse TLS 1.1 by themselves, so the pair proves
    it: with the defaults a TLS 1.1 client at security level 0 is refused;
    with proxy.config.ssl.TLSv1_1 1 the same client connects."""
    files = tls_files("v.test")
    files["ssl_multicert.config"] = "ssl_cert_name=v.test.pem ssl_key_name=v.test.key\n"
    args = ["-tls1_1", "-cipher", "DEFAULT:@SECLEVEL=0", "-servername", "v.test"]
    with Cistern(records=tls_records(), files=files) as c:
        rc, out = s_client(tls_port(c), args)
        expect(re.search(r"Cipher is \(NONE\)", out) and "alert protocol version" in out,
               "TLS 1.1 not refused by default: %s" % out[-1500:])
    with Cistern(records=tls_records({"proxy.config.ssl.TLSv1_1": 1}), files=files) as c:
        rc, out = s_client(tls_port(c), args + ["-ign_eof"],
                           b"GET / HTTP/1.0\r\nHost: v.test\r\n\r\n")
        expect(re.search(r"New, TLSv1(\.\d)?, Cipher is ECDHE", out)
               and re.search(r"Protocol\s*: TLSv1\.1", out),
               "TLS 1.1 refused when enabled: %s" % out[-1500:])
        expect(re.search(r"HTTP/1\.[01] 404", out), "no response over TLS 1.1: %s" % out[-800:])


def _resume(c, proto):
    sess = os.path.join(TMP, "sess-%s-%d" % (proto, tls_port(c)))
    req = b"GET / HTTP/1.1\r\nHost: s.test\r\nConnection: close\r\n\r\n"
    rc, out = s_client(tls_port(c), [proto, "-servername", "s.test", "-ign_eof",
                                     "-sess_out", sess], req)
    expect(os.path.exists(sess), "no session saved: %s" % out[-1500:])
    workers = set()
    for i in range(12):
        rc, out = s_client(tls_port(c), [proto, "-servername", "s.test", "-ign_eof",
                                         "-sess_in", sess], req)
        expect(re.search(r"^Reused", out, re.M),
               "%s connection %d not resumed: %s" % (proto, i, out[-2000:]))
        m = re.search(r"X-Cistern-Worker: (\d+)", out)
        if m:
            workers.add(m.group(1))
    return workers


def test_session_resumption_across_workers():
    """Tickets are sealed with keys every worker shares: a session saved
    from one connection resumes on every later one, whichever of the two
    workers accepts it (TLS 1.2 and 1.3)."""
    files = tls_files("s.test")
    files["ssl_multicert.config"] = "ssl_cert_name=s.test.pem ssl_key_name=s.test.key\n"
    with Origin() as o:
        with Cistern(records=tls_records({"proxy.config.cistern.debug_headers": 1}),
                     remap=["map https://s.test/ http://%s/" % o.authority],
                     files=files, workers=2) as c:
            w12 = _resume(c, "-tls1_2")
            w13 = _resume(c, "-tls1_3")
            expect_eq(len(w12 | w13), 2, "workers seen resuming (%r)" % (w12 | w13))
            st = stats(c)
            expect(int(st["proxy.process.ssl.ssl_session_cache_hit"]) >= 24,
                   "resumptions counted: %r" % st)


def test_handshake_timeout():
    """A client that connects to the ssl port and says nothing is closed at
    request_header_timeout."""
    files = tls_files("h.test")
    files["ssl_multicert.config"] = "ssl_cert_name=h.test.pem ssl_key_name=h.test.key\n"
    with Cistern(records=tls_records({"proxy.config.cistern.request_header_timeout": 1}),
                 files=files) as c:
        with harness.Conn(tls_port(c)) as k:
            expect(k.closed_within(4), "silent TLS client not closed")
        with harness.Conn(tls_port(c)) as k:
            k.send(b"\x16\x03\x01\x00")     # the start of a ClientHello
            expect(k.closed_within(4), "stalled handshake not closed")


def test_https_origin_cut_without_close_notify_is_truncated():
    """A TLS origin that ends a close-delimited body by closing the TCP
    connection without close_notify has been cut: the client sees the cut
    and nothing is stored (issue 16: `PARTIAL-` was stored and served with
    Content-Length: 8).  The same body ended with close_notify is whole."""
    oc, ok = ca_signed("origin.test", ["origin.test", "localhost"])
    ca = make_ca()[0]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(oc, ok)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    port = lsock.getsockname()[1]

    def serve():
        while True:
            try:
                s, _ = lsock.accept()
            except OSError:
                return
            try:
                t = ctx.wrap_socket(s, server_side=True)
                req = b""
                while b"\r\n\r\n" not in req:
                    d = t.recv(4096)
                    if not d:
                        break
                    req += d
                t.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\n"
                          b"Connection: close\r\n\r\nPARTIAL-")
                if b"/clean" in req:
                    t.unwrap().close()  # close_notify, then close
                else:
                    t.shutdown(socket.SHUT_RDWR)    # TCP close, no close_notify
                    t.close()
            except (OSError, ssl.SSLError):
                pass
    th = threading.Thread(target=serve, daemon=True)
    th.start()
    try:
        with Cistern(records={"proxy.config.ssl.client.CA.cert.filename": ca},
                     workers=1, storage=["cache 64M"],
                     remap=["map http://t.test/ https://localhost:%d/" % port]) as c:
            c.expect_log(r"origin localhost:\d+: ")
            for _ in range(2):
                r = harness.one_request(c.port, "GET", "/cut", host="t.test",
                                        close_delimited_ok=True)
                expect(r is None or r.header("Content-Length") is None,
                       "a cut body was framed as complete: %r" % (r and r.raw[:200]))
                expect(r is None or not harness.is_hit(r), "a cut body was stored")
            r = harness.one_request(c.port, "GET", "/clean", host="t.test")
            expect(r is not None and r.body == b"PARTIAL-", "clean close: %r" % r)
            r = harness.one_request(c.port, "GET", "/clean", host="t.test")
            expect(r is not None and harness.is_hit(r) and r.body == b"PARTIAL-",
                   "a body ended by close_notify is whole and stored: %r" % r)
    finally:
        lsock.close()


if __name__ == "__main__":
    try:
        harness.main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
