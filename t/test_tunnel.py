#!/usr/bin/env python3
"""t/test_tunnel.py: CONNECT tunnels and protocol upgrades (issue 19).

CONNECT host:port with remap_required 0 to a port of
proxy.config.http.connect_ports: 200 Connection established, then the
bytes relayed both ways (a real TLS handshake and an HTTP exchange to a
local TLS server, made with `openssl req`); refusals (port, ip_allow,
remap_required 1, TLS ports); an unreachable target; bytes pipelined
after the head; half-close both ways; fds freed whichever side closes;
bounded memory under a slow reader; the idle timeout; the counters and
the access log.  Upgrade through a remap rule: a WebSocket echo both
ways; a 101 the client did not ask for stays a 502; h2c is not forwarded.
"""
import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import subprocess
import tempfile
import threading
import time

import harness
from harness import access_lines
from harness import Cistern, Origin, curl, expect, expect_eq, expect_in, wait_for


# ------------------------------------------------------------------
# Local servers (threads), each on a kernel-chosen port of 127.0.0.1

class Server:
    """A TCP server running handler(sock) for each connection in a thread."""

    def __init__(self, handler):
        self.handler = handler
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.conns = []
        self.errors = []
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.append(s)
            threading.Thread(target=self._one, args=(s,), daemon=True).start()

    def _one(self, s):
        try:
            self.handler(s)
        except Exception as e:      # reported by the test that cares
            self.errors.append(repr(e))
        finally:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop = True
        self.lsock.close()
        for s in self.conns:
            try:
                s.close()
            except OSError:
                pass


def recv_all(s, timeout=10.0):
    """Read until EOF."""
    s.settimeout(timeout)
    out = b""
    while True:
        d = s.recv(65536)
        if not d:
            return out
        out += d


def recv_exact(s, n, timeout=10.0):
    s.settimeout(timeout)
    out = b""
    while len(out) < n:
        d = s.recv(n - len(out))
        if not d:
            break
        out += d
    return out


def make_cert(d, name="tunnel.test"):
    crt, key = os.path.join(d, "c.pem"), os.path.join(d, "k.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-days", "2", "-subj", "/CN=" + name,
                        "-addext", "subjectAltName=DNS:" + name, "-newkey", "rsa:2048",
                        "-nodes", "-keyout", key, "-out", crt],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        raise harness.HarnessError("openssl req: %s" % p.stderr.decode(errors="replace"))
    return crt, key


def connect_via(c, target, extra=b"", src=None, head=None):
    """Open a connection to Cistern, send CONNECT target (and extra bytes in
    the same send); return (socket, the response head bytes, the bytes
    read past it)."""
    s = socket.socket()
    if src:
        s.bind((src, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", c.port))
    req = head or ("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode()
    s.sendall(req + extra)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            break
        buf += d
    h, _, rest = buf.partition(b"\r\n\r\n")
    return s, h, rest


def status_of(head):
    try:
        return int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


# The targets here are on 127.0.0.1, which a forward proxy refuses to reach
# (CONNECT included) unless a destination rule opens it (issue 19).
LOOPBACK_OK = ["src_ip=127.0.0.1 action=ip_allow method=ALL",
               "dest_ip=127.0.0.1 action=ip_allow method=ALL"]


def fwd_records(ports, extra=None):
    r = {"proxy.config.url_remap.remap_required": 0,
         "proxy.config.http.connect_ports": ports}
    r.update(extra or {})
    return r


def worker_fds(c):
    out = {}
    for pid in c.worker_pids():
        try:
            out[pid] = len(os.listdir("/proc/%d/fd" % pid))
        except OSError:
            pass
    return out


def stats(c):
    r = curl([c.url("/_stats")])
    expect_eq(r.status, 200, "/_stats status")
    return json.loads(r.body)["global"]



# ------------------------------------------------------------------
# CONNECT

def test_connect_tls_end_to_end():
    """CONNECT to the port of a local TLS server: 200, then a real TLS
    handshake (verified against the server's self-signed certificate) and
    an HTTP exchange over the tunnel; counters and the access log."""
    d = tempfile.mkdtemp(prefix="cistern-tunnel-")
    crt, key = make_cert(d)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(crt, key)

    def tls_http(s):
        with sctx.wrap_socket(s, server_side=True) as t:
            t.settimeout(10)
            req = b""
            while b"\r\n\r\n" not in req:
                d = t.recv(4096)
                if not d:
                    return
                req += d
            body = b"secret over tls: " + req.split(b"\r\n")[0]
            t.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                      % len(body) + body)

    with Server(tls_http) as srv, \
            Cistern(records=fwd_records("443 %d" % srv.port), ip_allow=LOOPBACK_OK, workers=1) as c:
        s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port)
        expect_eq(status_of(h), 200, "CONNECT status (%r)" % h)
        expect_in(b"Connection established", h, "reason phrase")
        expect_eq(rest, b"", "bytes after the 200")
        cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        cctx.load_verify_locations(crt)
        with cctx.wrap_socket(s, server_hostname="tunnel.test") as t:
            t.sendall(b"GET /over/tunnel HTTP/1.1\r\nHost: tunnel.test\r\n\r\n")
            resp = recv_all(t)
        expect_in(b"200 OK", resp, "inner response")
        expect_in(b"secret over tls: GET /over/tunnel HTTP/1.1", resp, "inner body")
        expect_eq(srv.errors, [], "server errors")

        def closed():
            st = stats(c)
            return st if st["proxy.process.tunnel.current_active_connections"] == "0" else None
        st = wait_for(closed, 5, what="the tunnel counted closed")
        expect_eq(st["proxy.process.http.tunnels"], "1", "tunnels opened")
        expect(int(st["proxy.process.cistern.tunnel_bytes_up"]) > 200,
               "bytes up: %s" % st["proxy.process.cistern.tunnel_bytes_up"])
        expect(int(st["proxy.process.cistern.tunnel_bytes_down"]) > 500,
               "bytes down: %s" % st["proxy.process.cistern.tunnel_bytes_down"])
        m = curl([c.url("/_metrics")]).body
        expect_in(b'cistern_tunnels_total 1', m, "/_metrics")
        lines = access_lines(c, 1)
        line = [l for l in lines if "CONNECT" in l]
        expect(line, "no CONNECT line: %r" % lines)
        expect_in('"CONNECT 127.0.0.1:%d HTTP/1.1" 200 ' % srv.port, line[0], "access log")
        expect_in("TCP_TUNNEL", line[0], "access log result")
        nbytes = int(line[0].split('" 200 ')[1].split()[0])
        expect(nbytes > 500, "logged bytes %d" % nbytes)


def test_connect_refusals():
    """403 with a reason for a port outside connect_ports (the default is
    443), 403 for a client ip_allow denies CONNECT, 403 with
    remap_required 1; never a tunnel: the connection closes."""
    hits = []

    def count(s):
        hits.append(1)
    with Server(count) as srv:
        with Cistern(records=fwd_records("443 1-1000"), ip_allow=LOOPBACK_OK, workers=1) as c:
            s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port)
            expect_eq(status_of(h), 403, "port not allowed (%r)" % h)
            body = rest + recv_all(s)
            expect_in(b"not in proxy.config.http.connect_ports", body, "reason")
            s.close()
        with Cistern(records={"proxy.config.url_remap.remap_required": 0}, workers=1) as c:
            s, h, _ = connect_via(c, "127.0.0.1:%d" % srv.port)
            expect_eq(status_of(h), 403, "default connect_ports (443)")
            s.close()
        ip_allow = ["src_ip=127.0.0.1 action=ip_allow method=ALL",
                    "src_ip=127.0.0.2 action=ip_deny method=CONNECT",
                    "dest_ip=127.0.0.1 action=ip_allow method=ALL"]
        with Cistern(records=fwd_records("*"), ip_allow=ip_allow, workers=1) as c:
            s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port, src="127.0.0.2")
            expect_eq(status_of(h), 403, "ip_allow denies CONNECT")
            expect_in(b"ip_allow", rest + recv_all(s), "reason")
            s.close()
            r = curl([c.url("/x"), "--interface", "127.0.0.2"])
            expect_eq(r.status, 404, "127.0.0.2 may GET (no rule: 404, not 403)")
            s, h, _ = connect_via(c, "127.0.0.1:%d" % srv.port)
            expect_eq(status_of(h), 200, "127.0.0.1 may CONNECT (connect_ports *)")
            s.close()
        with Cistern(records={"proxy.config.http.connect_ports": "*"}, workers=1) as c:
            s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port)
            expect_eq(status_of(h), 403, "remap_required 1")
            expect_in(b"remap_required", rest + recv_all(s), "reason")
            s.close()
        # no destination rule: the machine itself is out of reach
        with Cistern(records=fwd_records("*"), workers=1) as c:
            for target in ("127.0.0.1:%d" % srv.port, "localhost:%d" % srv.port,
                           "[::1]:%d" % srv.port, "169.254.169.254:443"):
                s, h, _ = connect_via(c, target)
                expect_eq(status_of(h), 403, "CONNECT %s without a dest rule"
                          % target)
                s.close()
        time.sleep(0.3)
        expect_eq(len(hits), 1, "connections that reached the target")


def test_connect_port_syntax():
    """connect_ports takes ports, ranges and * (ATS syntax); garbage is a
    config error."""
    r = harness.check_config(records={"proxy.config.http.connect_ports": "443 8000-9000"})
    expect_eq(r.rc, 0, "valid list: %s" % r.stderr)
    r = harness.check_config(records={"proxy.config.http.connect_ports": "443 x"})
    expect(r.rc != 0, "bad list accepted")
    expect_in("connect_ports", r.stdout + r.stderr, "message")
    r = harness.check_config(records={"proxy.config.http.connect_ports": "9000-8000"})
    expect(r.rc != 0, "reversed range accepted")


def test_connect_unreachable():
    """A target nobody listens on: 502; a name that does not resolve: 502."""
    s0 = socket.socket()
    s0.bind(("127.0.0.1", 0))
    dead = s0.getsockname()[1]
    s0.close()
    with Cistern(records=fwd_records("*"), ip_allow=LOOPBACK_OK, workers=1) as c:
        s, h, _ = connect_via(c, "127.0.0.1:%d" % dead)
        expect_eq(status_of(h), 502, "refused target (%r)" % h)
        s.close()
        s, h, _ = connect_via(c, "no-such-host.invalid:443")
        expect_eq(status_of(h), 502, "unresolvable target (%r)" % h)
        s.close()
        st = stats(c)
        expect_eq(st["proxy.process.http.tunnels"], "0", "no tunnel counted")


def test_connect_pipelined_bytes():
    """Bytes sent in the same packet as the CONNECT head (a pipelined
    ClientHello) reach the target first, then the rest both ways."""
    got = []

    def echo(s):
        s.settimeout(10)
        while True:
            d = s.recv(65536)
            if not d:
                return
            got.append(d)
            s.sendall(d)
    with Server(echo) as srv, Cistern(records=fwd_records(str(srv.port)), ip_allow=LOOPBACK_OK,
            workers=1) as c:
        s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port, extra=b"EARLY-BYTES|")
        expect_eq(status_of(h), 200, "status")
        rest += recv_exact(s, 12 - len(rest))
        expect_eq(rest, b"EARLY-BYTES|", "early bytes echoed")
        s.sendall(b"later")
        expect_eq(recv_exact(s, 5), b"later", "later bytes echoed")
        s.close()
        expect_eq(b"".join(got), b"EARLY-BYTES|later", "what the target received")


def test_connect_half_close_and_fds():
    """A client that half-closes still gets everything the target sends
    after; the target's close ends the tunnel.  Whichever side closes
    first, both fds are freed (the worker's fd count comes back)."""
    def reply_after_eof(s):
        data = recv_all(s)
        s.sendall(b"you sent %d bytes" % len(data))
        s.shutdown(socket.SHUT_WR)

    def server_closes(s):
        s.sendall(b"bye")
        s.close()

    def server_waits(s):
        s.settimeout(20)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass

    with Server(reply_after_eof) as a, Server(server_closes) as b, Server(server_waits) as w, \
            Cistern(records=fwd_records("%d %d %d" % (a.port, b.port, w.port)), ip_allow=LOOPBACK_OK,
            workers=1) as c:
        curl([c.url("/_stats")])
        base = worker_fds(c)
        # client half-closes; the target answers after its EOF
        s, h, _ = connect_via(c, "127.0.0.1:%d" % a.port)
        expect_eq(status_of(h), 200, "status")
        s.sendall(b"x" * 100000)
        s.shutdown(socket.SHUT_WR)
        expect_eq(recv_all(s), b"you sent 100000 bytes", "answer after the half-close")
        s.close()
        # the target closes first
        s, h, rest = connect_via(c, "127.0.0.1:%d" % b.port)
        expect_eq(rest + recv_all(s), b"bye", "target's bytes, then EOF")
        s.close()
        # the client closes first (fully), the target waits for its EOF
        for _ in range(5):
            s, h, _ = connect_via(c, "127.0.0.1:%d" % w.port)
            expect_eq(status_of(h), 200, "status")
            s.sendall(b"hello")
            s.close()
        wait_for(lambda: worker_fds(c) == base, 10,
                 what="worker fds back to %r (now %r)" % (base, worker_fds(c)))
        st = stats(c)
        expect_eq(st["proxy.process.tunnel.current_active_connections"], "0", "active")
        expect_eq(st["proxy.process.http.tunnels"], "7", "opened")


def test_connect_reset_frees_both():
    """A client that resets its connection mid-tunnel: the target sees the
    tunnel cut (EOF or reset), and the worker's fds come back."""
    seen = []

    def hold(s):
        s.settimeout(20)
        try:
            while True:
                d = s.recv(4096)
                if not d:
                    seen.append("eof")
                    return
        except OSError as e:
            seen.append("reset")

    with Server(hold) as srv, Cistern(records=fwd_records(str(srv.port)), ip_allow=LOOPBACK_OK,
            workers=1) as c:
        curl([c.url("/_stats")])
        base = worker_fds(c)
        s, h, _ = connect_via(c, "127.0.0.1:%d" % srv.port)
        expect_eq(status_of(h), 200, "status")
        s.sendall(b"abc")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        wait_for(lambda: seen, 10, what="the target to see the end")
        wait_for(lambda: worker_fds(c) == base, 10, what="worker fds back")


@harness.timeout(240)
def test_connect_slow_reader_bounded():
    """50 MiB from the target to a client that reads slowly: the worker's
    RssAnon stays bounded (the target is not read while the client's side
    is full), and every byte arrives in order."""
    total = 50 * 1024 * 1024
    chunk = bytes(range(256)) * 256     # 64 KiB, a pattern

    def blast(s):
        sent = 0
        s.settimeout(120)
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
        s.shutdown(socket.SHUT_WR)
        recv_all(s, 120)

    with Server(blast) as srv, Cistern(records=fwd_records(str(srv.port)), ip_allow=LOOPBACK_OK,
            workers=1) as c:
        pid = c.worker_pids()[0]
        s, h, rest = connect_via(c, "127.0.0.1:%d" % srv.port)
        expect_eq(status_of(h), 200, "status")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        rss0 = harness.rss_anon(pid)
        got = len(rest)
        peak = 0
        h256 = hashlib.sha256(rest)
        s.settimeout(30)
        # slowly for the first 3 MiB, then fast
        while got < total:
            d = s.recv(16384 if got < 3 * 1024 * 1024 else 1 << 20)
            if not d:
                break
            h256.update(d)
            got += len(d)
            if got < 3 * 1024 * 1024:
                time.sleep(0.005)
            if got % (1 << 20) < len(d):
                peak = max(peak, harness.rss_anon(pid))
        expect_eq(got, total, "bytes received")
        expect_eq(s.recv(10), b"", "EOF after the last byte")
        want = hashlib.sha256(chunk * (total // len(chunk))).hexdigest()
        expect_eq(h256.hexdigest(), want, "bytes in order")
        s.close()
        expect(peak - rss0 < 8 * 1024 * 1024,
               "RssAnon grew by %d KiB while relaying" % ((peak - rss0) // 1024))


def test_connect_idle_timeout():
    """No byte either way for min(transaction_no_activity_timeout_in,
    _out): both sides are closed."""
    ended = []

    def wait_eof(s):
        s.settimeout(30)
        t0 = time.time()
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        ended.append(time.time() - t0)

    recs = fwd_records("*", {"proxy.config.http.transaction_no_activity_timeout_in": 2,
                             "proxy.config.http.transaction_no_activity_timeout_out": 30})
    with Server(wait_eof) as srv, Cistern(records=recs, ip_allow=LOOPBACK_OK, workers=1) as c:
        s, h, _ = connect_via(c, "127.0.0.1:%d" % srv.port)
        expect_eq(status_of(h), 200, "status")
        t0 = time.time()
        s.sendall(b"ping")      # activity: the timer starts over
        time.sleep(1.0)
        s.sendall(b"ping")
        s.settimeout(20)
        expect_eq(recv_all(s, 20), b"", "closed by the proxy")
        took = time.time() - t0
        expect(1.5 < took < 10, "closed after %.1f s" % took)
        wait_for(lambda: ended, 5, what="the target closed too")


def test_connect_on_tls_port_refused():
    """CONNECT on a TLS listener is refused with 405 (documented): the
    relay reads raw sockets."""
    d = tempfile.mkdtemp(prefix="cistern-tunnel-")
    crt, key = make_cert(d, "proxy.test")
    recs = fwd_records("*", {"proxy.config.http.server_ports": "0 0:ssl"})
    files = {"proxy.pem": open(crt).read(), "proxy.key": open(key).read(),
             "ssl_multicert.config": "dest_ip=* ssl_cert_name=proxy.pem ssl_key_name=proxy.key\n"}
    with Cistern(records=recs, files=files, workers=1) as c:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with socket.create_connection(("127.0.0.1", c.ports[1]), timeout=10) as raw_s, \
                ctx.wrap_socket(raw_s, server_hostname="proxy.test") as t:
            t.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
            data = b""
            try:
                while True:
                    d2 = t.recv(4096)
                    if not d2:
                        break
                    data += d2
            except (ssl.SSLError, OSError):
                pass
        expect_eq(status_of(data), 405, "status (%r)" % data[:200])


# ------------------------------------------------------------------
# Upgrade

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_server(seen):
    """A tiny WebSocket echo origin: the handshake, then each frame echoed
    (unmasked) until a close frame."""
    def handler(s):
        s.settimeout(10)
        req = b""
        while b"\r\n\r\n" not in req:
            d = s.recv(4096)
            if not d:
                return
            req += d
        head, _, rest = req.partition(b"\r\n\r\n")
        seen.append(head)
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            fields[k.strip().lower()] = v.strip()
        if b"websocket" not in fields.get(b"upgrade", b"").lower() \
                or b"upgrade" not in fields.get(b"connection", b"").lower():
            s.sendall(b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")
            return
        acc = base64.b64encode(hashlib.sha1(fields[b"sec-websocket-key"] + WS_GUID).digest())
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        buf = rest
        while True:
            while len(buf) < 2:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            b1, b2 = buf[0], buf[1]
            n, off = b2 & 0x7f, 2
            if n == 126:
                n, off = struct.unpack(">H", buf[2:4])[0], 4
            elif n == 127:
                n, off = struct.unpack(">Q", buf[2:10])[0], 10
            mask = b""
            if b2 & 0x80:
                mask, off = buf[off:off + 4], off + 4
            while len(buf) < off + n:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            payload = buf[off:off + n]
            buf = buf[off + n:]
            if mask:
                payload = bytes(x ^ mask[i % 4] for i, x in enumerate(payload))
            s.sendall(ws_frame(b1 & 0x0f, payload))
            if b1 & 0x0f == 8:
                return
    return handler


def ws_frame(op, payload, mask=None):
    h = bytes([0x80 | op])
    n = len(payload)
    m = 0x80 if mask else 0
    if n < 126:
        h += bytes([m | n])
    elif n < 65536:
        h += bytes([m | 126]) + struct.pack(">H", n)
    else:
        h += bytes([m | 127]) + struct.pack(">Q", n)
    if mask:
        h += mask
        payload = bytes(x ^ mask[i % 4] for i, x in enumerate(payload))
    return h + payload


def ws_read_frame(s):
    hd = recv_exact(s, 2)
    n = hd[1] & 0x7f
    if n == 126:
        n = struct.unpack(">H", recv_exact(s, 2))[0]
    elif n == 127:
        n = struct.unpack(">Q", recv_exact(s, 8))[0]
    return hd[0] & 0x0f, recv_exact(s, n)


def ws_handshake(c, host="ws.test", path="/chat", extra=b""):
    key = base64.b64encode(os.urandom(16))
    s = socket.create_connection(("127.0.0.1", c.port), timeout=10)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode()
              + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n" + extra)
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    return s, key, head, rest


def test_websocket_echo_through_remap():
    """A WebSocket handshake through a remap rule gets the origin's 101
    (with its Upgrade, Connection and Sec-WebSocket-Accept), then masked
    frames go up and come back echoed, text and binary, small and 100 KiB;
    the close frame ends it and the fds come back.  Never cached."""
    seen = []
    with Server(ws_server(seen)) as srv, \
            Cistern(remap=["map http://ws.test/ http://127.0.0.1:%d/" % srv.port],
                    storage=["cache 64M"], workers=1) as c:
        curl([c.url("/_stats")])
        base = worker_fds(c)
        s, key, head, rest = ws_handshake(c)
        expect_eq(status_of(head), 101, "status (%r)" % head)
        low = head.lower()
        expect_in(b"upgrade: websocket", low, "Upgrade")
        expect_in(b"connection: upgrade", low, "Connection")
        acc = base64.b64encode(hashlib.sha1(key + WS_GUID).digest())
        expect_in(b"sec-websocket-accept: " + acc.lower(), low, "accept key")
        expect_in(b"upgrade: websocket", seen[0].lower(), "Upgrade forwarded")
        expect_in(b"connection: upgrade", seen[0].lower(), "Connection forwarded")
        expect_eq(rest, b"", "bytes after the 101")
        for op, payload in ((1, b"hello websocket"), (2, os.urandom(100 * 1024)),
                            (1, "h\u00e9llo".encode())):
            s.sendall(ws_frame(op, payload, mask=os.urandom(4)))
            gop, gp = ws_read_frame(s)
            expect_eq((gop, gp == payload), (op, True), "echo of a %d-byte frame" % len(payload))
        s.sendall(ws_frame(8, b"\x03\xe8", mask=b"abcd"))
        expect_eq(ws_read_frame(s)[0], 8, "close echoed")
        expect_eq(recv_all(s), b"", "then EOF")
        s.close()
        # a second handshake goes to the origin again (not a cached answer)
        s, key, head, _ = ws_handshake(c)
        expect_eq(status_of(head), 101, "second handshake")
        s.sendall(ws_frame(1, b"again", mask=b"wxyz"))
        expect_eq(ws_read_frame(s), (1, b"again"), "second echo")
        s.close()
        expect_eq(len(seen), 2, "handshakes at the origin")
        wait_for(lambda: worker_fds(c) == base, 10, what="worker fds back")
        st = stats(c)
        expect_eq(st["proxy.process.http.tunnels"], "2", "tunnels")
        expect(int(st["proxy.process.http.1xx_responses"]) >= 2, "101s counted")
        lines = access_lines(c, 2)
        ws = [l for l in lines if '"GET /chat HTTP/1.1" 101 ' in l]
        expect_eq(len(ws), 2, "access log lines of the 101s: %r" % lines)


def test_websocket_frames_right_after_101():
    """Frames the origin sends in the same packet as its 101, and frames
    the client sends right behind its handshake, are not lost."""
    def eager(s):
        s.settimeout(10)
        req = b""
        while b"\r\n\r\n" not in req:
            req += s.recv(4096)
        rest = req.partition(b"\r\n\r\n")[2]
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\n\r\n" + ws_frame(1, b"welcome"))
        while len(rest) < 9:
            rest += s.recv(4096)
        s.sendall(ws_frame(1, b"got:" + rest))
        recv_all(s)

    with Server(eager) as srv, \
            Cistern(remap=["map http://ws.test/ http://127.0.0.1:%d/" % srv.port],
                    workers=1) as c:
        s, key, head, rest = ws_handshake(c, extra=b"EARLY-WS!")
        expect_eq(status_of(head), 101, "status")
        want = ws_frame(1, b"welcome") + ws_frame(1, b"got:EARLY-WS!")
        data = rest + recv_exact(s, len(want) - len(rest))
        expect_eq(data, want, "the frame sent with the 101, then the echo of the "
                  "client's bytes behind its head")
        s.close()


def test_unrequested_101_is_502():
    """An origin that answers 101 to a request that asked for no upgrade:
    502, as before; h2c is never forwarded (stripped), so its 101 is a
    502 too."""
    seen = []

    def always_101(s):
        s.settimeout(10)
        req = b""
        while b"\r\n\r\n" not in req:
            d = s.recv(4096)
            if not d:
                return
            req += d
        seen.append(req)
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: upgrade\r\n\r\n")
        recv_all(s)

    with Server(always_101) as srv, \
            Cistern(remap=["map http://u.test/ http://127.0.0.1:%d/" % srv.port],
                    workers=1) as c:
        r = curl([c.url("/plain"), "-H", "Host: u.test"])
        expect_eq(r.status, 502, "101 to a plain GET")
        r = curl([c.url("/h2c"), "-H", "Host: u.test", "-H", "Upgrade: h2c",
                  "-H", "Connection: Upgrade, HTTP2-Settings", "-H", "HTTP2-Settings: AAMAAABkAAQAAP__"])
        expect_eq(r.status, 502, "h2c")
        expect(b"upgrade" not in seen[-1].lower().replace(b"connection: close", b""),
               "h2c Upgrade forwarded: %r" % seen[-1])
        r = curl([c.url("/post"), "-H", "Host: u.test", "-H", "Upgrade: websocket",
                  "-H", "Connection: Upgrade", "--data", "x"])
        expect_eq(r.status, 502, "Upgrade on a POST is not forwarded")
        expect(b"upgrade:" not in seen[-1].lower(), "POST's Upgrade forwarded")
        c.expect_log(r"101 Switching Protocols to a request")


def test_upgrade_refused_by_origin_is_plain():
    """An origin that does not switch (426) answers as usual; the
    connection stays a normal keep-alive one."""
    with Origin() as o, Cistern(remap=["map http://o.test/ http://%s/" % o.authority],
                                workers=1) as c:
        r = curl([c.url("/status/426"), "-H", "Host: o.test", "-H", "Upgrade: websocket",
                  "-H", "Connection: Upgrade", c.url("/bytes/5"), "-H", "Host: o.test"])
        expect_eq(r.status, 200, "last status")


if __name__ == "__main__":
    harness.main()
