#!/usr/bin/env python3
"""t/origin.py: a scriptable HTTP/1.1 origin server for Cistern's tests.

Written directly on sockets (not http.server) so that it can misbehave on
purpose: lie about lengths, close mid-body, dawdle, send raw bytes.  One
thread per connection; keep-alive by the RFC rules, so ab runs through the
proxy stay fast.  Standard library only.

Run standalone:
    python3 t/origin.py --port 0 --port-file F [--host 127.0.0.1]
The port file is written atomically (rename) once the socket listens.

Every request except the control ones (/__*) is RECORDED: method, target,
version, headers, body, connection id and sequence number.  Tests read the
record with GET /__log (JSON list) and clear it with GET /__reset.

Response selection, first match wins:
 1. a scripted response for the exact path (POST /__script, see below);
 2. the path conventions: the path is a sequence of directives, applied left
    to right, so they compose (`/delay/200/status/404/bytes/10`):
      status/N          response status N (default 200)
      bytes/N           body: N bytes of pattern(N) (see pattern())
      chunked/N         body of N pattern bytes, sent chunked (1 KiB chunks)
      no-length/N       body of N pattern bytes, no Content-Length: the
                        connection closes to end it
      delay/MS          wait MS ms before sending the response head
      slow-body/N/MS    N pattern bytes with Content-Length, sent in 10
                        pieces with MS ms between pieces
      close-mid-body/N  announce Content-Length N, send N/2 bytes, close
      close             read the request, close without any response
      reset             read the request, close with a RST (SO_LINGER 0)
      conn-close        add `Connection: close` and close after the response
      no-continue       do not send `100 Continue` for `Expect: 100-continue`
      reject-continue   answer `417` to `Expect: 100-continue` without
                        reading the body
      headers           every query parameter becomes a response header
                        (`/headers?Cache-Control=max-age%3D60&X-Foo=bar`);
                        repeat a name to send it twice
      etag/TAG          send `ETag: "TAG"`; answer 304 when If-None-Match
                        matches
      last-modified/T   send Last-Modified for epoch T; answer 304 when
                        If-Modified-Since >= T
      echo              body: JSON of the request as recorded
      ranges            a single Range (`bytes=a-b`, `a-`, `-n`) of a
                        `bytes/N` (or `slow-body`, `close-mid-body`) body gets a 206 of that slice with its
                        Content-Range; anything else the whole 200
      100-continue      (no-op directive; 100-continue is always honoured)
      seed/S            body bytes come from seeded(S, N) instead of
                        pattern(N) (for bytes/, chunked/, no-length/,
                        slow-body/, close-mid-body/, stall/): objects of the
                        same size then differ, so a body served for the
                        wrong URL, or spliced from two objects, is caught
      hang              read the request, send nothing, and wait (up to
                        120 s) for the peer to close the connection
      stall/N           announce Content-Length N, send N/2 bytes, then wait
                        (up to 120 s) for the peer to close
      stream/N          N pattern bytes with Content-Length, generated and
                        sent piece by piece (for huge bodies: never held
                        whole in the origin's memory)
      drop-next         answer normally and keep the connection, but close
                        the NEXT request on this connection without any
                        response (a pooled connection that went dead); that
                        request is still recorded, with "dropped": true
      close-idle/MS     answer normally, keep the connection (no
                        Connection: close), then close it after MS ms idle
      sink              read a Content-Length request body piece by piece
                        and record only its length and SHA-256 (the body
                        field stays empty): for huge uploads
      slow-read/MS      with sink: sleep MS ms after each 64 KiB read
      die-at/PCT        with stream/N: close the connection once PCT percent
                        of the body is sent (an origin dying mid-transfer)
      stall-at/PCT      with stream/N: once PCT percent of the body is
                        sent, send nothing more and wait (up to 120 s) for
                        the peer to close (an origin stalling mid-transfer)
      rate/BPS          with stream/N: send at about BPS bytes per second
                        (64 KiB pieces, or smaller so that one goes out at
                        least every 0.5 s): a long, slow, still-moving origin
      slow-head/MS      send the response head one line at a time, MS ms
                        between lines (an origin trickling its head)
      head-stall        send the first half of the response head, then wait
                        (up to 120 s) for the peer to close
      head-close        send the first half of the head, then close
      head-reset        send the first half of the head, then close with a
                        RST
      silent-after-head/N  announce Content-Length N, send the head and no
                        body byte, then wait for the peer to close
      reset-mid-body/N  announce Content-Length N, send N/2 bytes, then
                        close with a RST
      close-early       read the request head and close before reading any
                        request body (the unread body makes the kernel send
                        a RST)
      reset-early       read the request head and close with a RST before
                        reading any request body
      deaf/MS           read the request head, then read nothing more (the
                        request body backs up) and send nothing for MS ms,
                        then close
      malformed/KIND    a head that breaks RFC 9112, then the body, keeping
                        the connection open (a proxy must not reuse it).
                        KIND: status-line (`HTTP/1.1 2OO OK`), no-colon (a
                        field line without a colon), bad-length
                        (`Content-Length: 12x`), two-lengths (two different
                        Content-Length values), length-and-chunked
                        (Content-Length and Transfer-Encoding: chunked, body
                        framed by the length), empty-lines (endless
                        leading CRLFs: empty lines sent without end until the
                        peer closes, never a status line), bad-chunk
                        (a valid chunked head, half the body in one chunk,
                        then the chunk-size line `zz`)
      extra/K           with a length-framed body: send K bytes more than the
                        Content-Length announced (K `X` bytes), and keep the
                        connection open
      smuggle           with a length-framed body: follow it, in the same
                        write, with a complete second response (`HTTP/1.1 200
                        OK`, Content-Length 20, body `SMUGGLED-RESPONSE!!\n`),
                        and keep the connection open
      once              the fault directives of this path (delay, slow-*,
                        close*, reset*, deaf, hang, stall, head-*,
                        silent-after-head, malformed, extra, smuggle,
                        rate, die-at, stall-at) apply only to the first request for the
                        path since the last /__reset; later requests
                        get the plain response (slow-body/N,
                        close-mid-body/N, stall/N, silent-after-head/N,
                        reset-mid-body/N become bytes/N): a test can
                        check what a follow-up GET gets
      extra-resp/N      after a Content-Length or chunked body, send N more
                        bytes: fake responses ("HTTP/1.1 200 OK ...
                        SMUGGLED") cut to N bytes, and keep the connection
                        (an origin that sends more than it announced)
      blank-lines       send empty lines (CRLF) instead of a response head,
                        as fast as the peer reads, until it closes (up to
                        120 s)
      bad-head/K        send malformed response K (BAD_HEADS[K % len]) and
                        close
    Every record also carries "body_len" and "body_sha256".
    Unknown segments are ignored, so `/anything/else` gets 200 with the body
    "METHOD TARGET\\n".
Every response carries `X-Origin-Seq: N` (the request's sequence number,
counting from 1 since the last reset) and `X-Origin-Conn: C` (the connection
id), which lets a test tell a cache hit from a fetch and a reused origin
connection from a new one.

Control API (never recorded):
  GET  /__log            JSON list of recorded requests (the newest 20000)
  GET  /__reset          clear the log, the scripts and the counters
  POST /__script         body JSON {"path": "/p", "responses": [R, ...]}:
                         responses for that exact path (query ignored),
                         used in order, the last one repeats.  R is
                         {"status": 200, "reason": "OK",
                          "headers": [["Name", "value"], ...],
                          "body": "latin-1 text" | "body_b64": "...",
                          "chunked": false, "delay_ms": 0, "close": false,
                          "no_length": false}
                         or {"raw_b64": "..."} sent verbatim then close
                         (with "keep": true, keep the connection instead;
                         with "reset_after_ms": N, wait N ms, then close
                         with a RST).
                         When "headers" has no Content-Length and the body
                         is neither chunked nor no_length, one is added.
  GET  /__stats          JSON {"requests": N, "connections": N, "open": N}
  GET  /__conns          JSON list of connections (control ones excluded
                         once known): {"conn": id, "opened": t,
                         "closed": t or null, "end": why} where why is
                         "peer-eof" (the peer closed), "peer-reset",
                         "origin" (we closed it), "error"
"""

import argparse
import base64
import hashlib
import json
import os
import random
import re
import socket
import sys
import threading
import time
import urllib.parse
from email.utils import formatdate, parsedate_to_datetime

ALPHABET = (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
MAX_HEAD = 256 * 1024
MAX_LOG = 20000         # records kept (the newest); /__stats counts all


def pattern(n, offset=0):
    """The deterministic body bytes: byte i of an object is
    ALPHABET[(offset + i) % 62], so any slice (a Range) is checkable."""
    out = bytearray()
    start = offset % len(ALPHABET)
    rot = ALPHABET[start:] + ALPHABET[:start]
    reps, rem = divmod(n, len(ALPHABET))
    out += rot * reps
    out += rot[:rem]
    return bytes(out)


def seeded(seed, n):
    """n deterministic pseudo-random bytes derived from the string seed
    (the same in every process and run: random.Random seeds a str through
    SHA-512).  Used by the seed/S directive."""
    return random.Random("cistern-seed:" + str(seed)).randbytes(n)


# The fake response that extra/N repeats after the real one: a proxy that
# reads it as the answer to its next request serves "SMUGGLED".
EXTRA_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n"
                  b"Cache-Control: max-age=600\r\n\r\nSMUGGLED")

# Malformed response heads (bad-head/K), each sent as is, then the close.
BAD_HEADS = [
    b"HTTP/1.1 2x0 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n"
    b"hello12",
    b"HTTP/1.1 200 OK\r\nBad Header Line\r\nContent-Length: 5\r\n\r\n"
    b"hello",
    b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello"
    b"\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n Folded: x\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    b"ICY 200 OK\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked"
    b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: a\0b\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * 200000 + b"\r\n"
    b"Content-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n"
    b"hello",
    b"HTTP/1.1 100 Continue\r\n\r\n" * 2000,
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"ffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nhello",
    b"HTTP/1.1 999999 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n",
    b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n",
    b"\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
]


class BadRequest(Exception):
    pass


class ConnReader:
    """Buffered reader on a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def read_head(self):
        """The request head up to and including CRLFCRLF, or None on a
        clean EOF before any byte."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                head, self.buf = self.buf[:i + 4], self.buf[i + 4:]
                return head
            if len(self.buf) > MAX_HEAD:
                raise BadRequest("head too large")
            try:
                self._fill()
            except EOFError:
                if self.buf:
                    raise BadRequest("EOF inside the head")
                return None

    def read_n(self, n):
        if len(self.buf) < n:
            # Gather pieces: repeated bytes += would be quadratic on a
            # multi-megabyte body.
            parts, have = [self.buf], len(self.buf)
            while have < n:
                data = self.sock.recv(max(65536, min(n - have, 1 << 20)))
                if not data:
                    self.buf = b"".join(parts)
                    raise EOFError
                parts.append(data)
                have += len(data)
            self.buf = b"".join(parts)
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def sink_n(self, n, slow_ms=0):
        """Read n body bytes without keeping them: (length, sha256)."""
        h = hashlib.sha256()
        got = 0
        if self.buf:
            take = self.buf[:n]
            self.buf = self.buf[len(take):]
            h.update(take)
            got = len(take)
        while got < n:
            data = self.sock.recv(min(65536, n - got))
            if not data:
                raise EOFError
            h.update(data)
            got += len(data)
            if slow_ms:
                time.sleep(slow_ms / 1000.0)
        return got, h.hexdigest()

    def wait_peer_close(self, limit=120.0):
        """Discard input until the peer closes (True) or limit s pass."""
        self.sock.settimeout(limit)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except socket.timeout:
            return False

    def read_line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            if len(self.buf) > MAX_HEAD:
                raise BadRequest("line too long")
            self._fill()

    def read_chunked(self):
        body = b""
        while True:
            line = self.read_line()
            size_s = line.split(b";", 1)[0].strip()
            try:
                size = int(size_s, 16)
            except ValueError:
                raise BadRequest("bad chunk size %r" % line)
            if size == 0:
                trailers = []
                while True:
                    t = self.read_line()
                    if not t:
                        return body, trailers
                    trailers.append(t.decode("latin-1"))
            body += self.read_n(size)
            if self.read_n(2) != b"\r\n":
                raise BadRequest("chunk not followed by CRLF")


def num(a):
    """int(a), or None when a is missing or not a number."""
    try:
        return int(a)
    except (TypeError, ValueError):
        return None


# Directives a `once` path drops after its first request: name -> number
# of arguments.  The ones in BECOME_BYTES turn into bytes/N instead.
FAULTS = {"delay": 1, "slow-body": 2, "close-mid-body": 1, "close": 0,
          "reset": 0, "hang": 0, "stall": 1, "slow-head": 1,
          "head-stall": 0, "head-close": 0, "head-reset": 0,
          "silent-after-head": 1, "reset-mid-body": 1, "close-early": 0,
          "reset-early": 0, "deaf": 1, "malformed": 1, "extra": 1,
          "smuggle": 0, "rate": 1, "die-at": 1, "stall-at": 1}
BECOME_BYTES = ("slow-body", "close-mid-body", "stall", "silent-after-head",
                "reset-mid-body")


def plain_segs(segs):
    """segs without the fault directives (see `once`)."""
    out = []
    i = 0
    while i < len(segs):
        d = segs[i]
        if d in FAULTS:
            nargs = FAULTS[d]
            if d == "slow-body" and (i + 2 >= len(segs)
                                     or num(segs[i + 2]) is None):
                nargs = 1
            args = segs[i + 1:i + 1 + nargs]
            if nargs and (not args or num(args[0]) is None) \
                    and d != "malformed":
                nargs = 0
                args = []
            if d in BECOME_BYTES and args:
                out += ["bytes", args[0]]
            i += 1 + nargs
            continue
        out.append(d)
        i += 1
    return out


def parse_head(head):
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3:
        raise BadRequest("bad request line %r" % lines[0])
    method, target, version = parts
    headers = []
    for ln in lines[1:]:
        s = ln.decode("latin-1")
        if ":" not in s:
            raise BadRequest("bad header line %r" % s)
        k, v = s.split(":", 1)
        headers.append([k, v.strip(" \t")])
    return method, target, version, headers


def hget(headers, name, default=None):
    name = name.lower()
    for k, v in headers:
        if k.lower() == name:
            return v
    return default


class Origin:
    def __init__(self, host, port):
        self.lock = threading.Lock()
        self.log = []
        self.scripts = {}
        self.seq = 0
        self.nconn = 0
        self.open = 0
        self.conns = {}         # cid -> {"conn", "opened", "closed", "end"}
        self.seen_paths = set()  # for the once directive
        fam = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.lsock = socket.socket(fam, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, port))
        self.lsock.listen(1024)
        self.port = self.lsock.getsockname()[1]

    # -- plumbing --------------------------------------------------------
    def serve_forever(self):
        while True:
            try:
                s, addr = self.lsock.accept()
            except OSError:
                continue
            with self.lock:
                self.nconn += 1
                cid = self.nconn
                self.open += 1
                self.conns[cid] = {"conn": cid, "opened": time.time(),
                                   "closed": None, "end": None,
                                   "control": False}
            t = threading.Thread(target=self.conn_main, args=(s, addr, cid),
                                 daemon=True)
            t.start()

    def conn_main(self, s, addr, cid):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        r = ConnReader(s)
        r.cid = cid
        r.drop_next = False
        r.peer_closed = False
        end = "origin"
        try:
            while True:
                keep = self.one_request(s, r, addr, cid)
                if not keep:
                    if r.peer_closed:
                        end = "peer-eof"
                    break
        except EOFError:
            end = "peer-eof"
        except ConnectionResetError:
            end = "peer-reset"
        except (ConnectionError, BrokenPipeError, socket.timeout):
            end = "error"
        except BadRequest as e:
            end = "origin"
            try:
                body = ("bad request: %s\n" % e).encode()
                s.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n"
                          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass
        finally:
            with self.lock:
                self.open -= 1
                rec = self.conns.get(cid)
                if rec is not None:
                    rec["closed"] = time.time()
                    rec["end"] = end
            try:
                s.close()
            except OSError:
                pass

    # -- one request -----------------------------------------------------
    def one_request(self, s, r, addr, cid):
        """Serve one request; return True to keep the connection."""
        head = r.read_head()
        if head is None:
            r.peer_closed = True
            return False
        method, target, version, headers = parse_head(head)
        url = urllib.parse.urlsplit(target)
        path = url.path
        query = urllib.parse.parse_qsl(url.query, keep_blank_values=True,
                                        encoding="latin-1")
        segs = [urllib.parse.unquote(x, encoding="latin-1") for x in path.split("/") if x]

        conn_hdr = (hget(headers, "Connection") or "").lower()
        if version == "HTTP/1.1":
            keep = "close" not in conn_hdr
        else:
            keep = "keep-alive" in conn_hdr

        # Request body.
        expect = (hget(headers, "Expect") or "").lower() == "100-continue"
        te = hget(headers, "Transfer-Encoding")
        cl = hget(headers, "Content-Length")
        if cl is not None and num(cl) is None:
            raise BadRequest("bad content-length %r" % cl)
        has_body = te is not None or (cl is not None and int(cl) > 0)
        if not path.startswith("/__") and ("close-early" in segs
                                           or "reset-early" in segs
                                           or "deaf" in segs):
            with self.lock:
                first = path not in self.seen_paths
            if "once" not in segs or first:
                with self.lock:
                    self.seen_paths.add(path)
                if "deaf" in segs:
                    k = segs.index("deaf")
                    ms = num(segs[k + 1]) if k + 1 < len(segs) else None
                    time.sleep((ms or 1000) / 1000.0)
                if "reset-early" in segs:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                 b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return False
        if expect and has_body and "reject-continue" in segs:
            s.sendall(b"HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0"
                      b"\r\nConnection: close\r\n\r\n")
            return False
        if expect and has_body and "no-continue" not in segs:
            s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        trailers = []
        sunk = None
        if te is not None:
            if te.lower().split(",")[-1].strip() != "chunked":
                raise BadRequest("unsupported transfer-encoding %r" % te)
            body, trailers = r.read_chunked()
        elif cl is not None and "sink" in segs:
            slow = 0
            if "slow-read" in segs:
                k = segs.index("slow-read")
                slow = num(segs[k + 1]) if k + 1 < len(segs) else 0
            sunk = r.sink_n(int(cl), slow or 0)
            body = b""
        elif cl is not None:
            try:
                n = int(cl)
            except ValueError:
                raise BadRequest("bad content-length")
            body = r.read_n(n)
        else:
            body = b""

        # Control endpoints.
        if path.startswith("/__"):
            with self.lock:
                if cid in self.conns:
                    self.conns[cid]["control"] = True
            return self.control(s, method, path, body, keep)

        if sunk is not None:
            body_len, body_sha = sunk
        else:
            body_len, body_sha = len(body), hashlib.sha256(body).hexdigest()
        dropped = r.drop_next
        r.drop_next = False

        with self.lock:
            self.seq += 1
            seq = self.seq
            rec = {"seq": seq, "conn": cid, "method": method,
                   "target": target, "path": path, "version": version,
                   "headers": headers,
                   "body": body.decode("latin-1"), "trailers": trailers,
                   "client": [addr[0], addr[1]], "time": time.time(),
                   "body_len": body_len, "body_sha256": body_sha}
            if dropped:
                rec["dropped"] = True
            self.log.append(rec)
            if len(self.log) > MAX_LOG:
                del self.log[:len(self.log) - MAX_LOG]
            first_for_path = path not in self.seen_paths
            self.seen_paths.add(path)
            script = None if dropped else self.scripts.get(path)
            resp = None
            if script:
                resp = script[0] if len(script) == 1 else script.pop(0)

        if dropped:
            return False        # drop-next: no response at all
        base = [["Date", formatdate(usegmt=True)],
                ["Server", "cistern-test-origin"],
                ["X-Origin-Seq", str(seq)], ["X-Origin-Conn", str(cid)]]
        if resp is not None:
            return self.send_scripted(s, method, resp, base, keep)
        if "once" in segs and not first_for_path:
            segs = plain_segs(segs)
        return self.send_conventional(s, method, segs, query, headers, rec,
                                      base, keep, r)

    def control(self, s, method, path, body, keep):
        if path == "/__log":
            with self.lock:
                out = json.dumps(self.log).encode()
        elif path == "/__reset":
            with self.lock:
                self.log = []
                self.scripts = {}
                self.seq = 0
                self.seen_paths = set()
            out = b"{}"
        elif path == "/__script":
            try:
                req = json.loads(body.decode())
                with self.lock:
                    self.scripts[req["path"]] = list(req["responses"])
                out = b"{}"
            except (ValueError, KeyError) as e:
                return self.simple(s, 400, ("bad script: %s\n" % e).encode(),
                                   keep)
        elif path == "/__conns":
            with self.lock:
                out = json.dumps([c for c in self.conns.values()
                                  if not c["control"]]).encode()
        elif path == "/__stats":
            with self.lock:
                out = json.dumps({"requests": self.seq,
                                  "connections": self.nconn,
                                  "open": self.open}).encode()
        else:
            return self.simple(s, 404, b"no such control endpoint\n", keep)
        return self.simple(s, 200, out, keep, ctype="application/json")

    def simple(self, s, status, body, keep, ctype="text/plain"):
        head = ("HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
                % (status, ctype, len(body)))
        if not keep:
            head += "Connection: close\r\n"
        s.sendall(head.encode() + b"\r\n" + body)
        return keep

    # -- responses -------------------------------------------------------
    @staticmethod
    def _head_bytes(status, reason, headers):
        out = ["HTTP/1.1 %d %s\r\n" % (status, reason)]
        for k, v in headers:
            out.append("%s: %s\r\n" % (k, v))
        out.append("\r\n")
        return "".join(out).encode("latin-1")

    def send_scripted(self, s, method, resp, base, keep):
        if resp.get("delay_ms"):
            time.sleep(resp["delay_ms"] / 1000.0)
        if "raw_b64" in resp:
            s.sendall(base64.b64decode(resp["raw_b64"]))
            if resp.get("keep"):
                return keep
            if resp.get("reset_after_ms") is not None:
                time.sleep(resp["reset_after_ms"] / 1000.0)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return False
        status = int(resp.get("status", 200))
        reason = resp.get("reason", "X")
        if "body_b64" in resp:
            body = base64.b64decode(resp["body_b64"])
        else:
            body = resp.get("body", "").encode("latin-1")
        headers = base + [list(h) for h in resp.get("headers", [])]
        names = {k.lower() for k, v in headers}
        chunked = resp.get("chunked", False)
        no_length = resp.get("no_length", False)
        bodyless = status in (204, 304) or 100 <= status < 200
        if chunked and "transfer-encoding" not in names:
            headers.append(["Transfer-Encoding", "chunked"])
        elif (not no_length and not bodyless
              and "content-length" not in names):
            headers.append(["Content-Length", str(len(body))])
        if resp.get("close") or no_length:
            keep = False
        if not keep and "connection" not in names:
            headers.append(["Connection", "close"])
        out = self._head_bytes(status, reason, headers)
        if method != "HEAD" and not bodyless:
            if chunked:
                if body:
                    out += b"%x\r\n%s\r\n" % (len(body), body)
                out += b"0\r\n\r\n"
            else:
                out += body
        s.sendall(out)
        return keep

    @staticmethod
    def send_head_badly(s, out, how, slow_ms, reader):
        """slow-head / head-*: send the head out of order; False when the
        connection is done."""
        if how == "slow":
            lines = out.split(b"\r\n")
            for j, ln in enumerate(lines[:-1]):
                if j:
                    time.sleep(slow_ms / 1000.0)
                s.sendall(ln + b"\r\n")
            return True
        s.sendall(out[:len(out) // 2])
        if how == "stall":
            if reader is not None:
                reader.peer_closed = reader.wait_peer_close()
        elif how == "reset":
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         b"\x01\x00\x00\x00\x00\x00\x00\x00")
        return False

    def send_malformed(self, s, kind, status, headers, body, reader):
        """malformed/KIND: see the module docstring.  The connection stays
        open (a proxy must not reuse it) until the peer closes it."""
        hs = [[k, v] for k, v in headers
              if k.lower() not in ("content-length", "transfer-encoding",
                                   "connection")]
        n = len(body)
        line = b"HTTP/1.1 %d OK\r\n" % status
        fields = [("%s: %s" % (k, v)).encode("latin-1") for k, v in hs]
        tail = body
        if kind == "empty-lines":
            s.settimeout(120)
            try:
                while True:
                    s.sendall(b"\r\n" * 512)
                    time.sleep(0.01)
            except OSError:
                pass
            return False
        if kind == "status-line":
            line = b"HTTP/1.1 2OO OK\r\n"
            fields.append(b"Content-Length: %d" % n)
        elif kind == "no-colon":
            fields += [b"X-Broken-Line-Without-Colon",
                       b"Content-Length: %d" % n]
        elif kind == "bad-length":
            fields.append(b"Content-Length: %dx" % n)
        elif kind == "two-lengths":
            fields += [b"Content-Length: %d" % n,
                       b"Content-Length: %d" % (n + 1)]
        elif kind == "length-and-chunked":
            fields += [b"Content-Length: %d" % n,
                       b"Transfer-Encoding: chunked"]
        elif kind == "bad-chunk":
            fields.append(b"Transfer-Encoding: chunked")
            half = body[:n // 2]
            tail = b"%x\r\n%s\r\nzz\r\n" % (len(half), half)
        else:
            raise BadRequest("unknown malformed kind %r" % kind)
        s.sendall(line + b"\r\n".join(fields) + b"\r\n\r\n" + tail)
        if reader is not None:
            reader.peer_closed = reader.wait_peer_close()
        return False

    @staticmethod
    def _extra(n):
        reps = n // len(EXTRA_RESPONSE) + 1
        return (EXTRA_RESPONSE * reps)[:n]

    @staticmethod
    def _range(rg, body, extra):
        """`ranges`: one `bytes=a-b`, `a-` or `-n` range gets a 206 of
        that slice with its Content-Range; anything else the whole 200."""
        m = re.match(r"bytes=(\d*)-(\d*)$", (rg or "").strip())
        n = len(body)
        if m is None or not (m.group(1) or m.group(2)):
            return 200, body
        if m.group(1):
            a = int(m.group(1))
            b = min(int(m.group(2)), n - 1) if m.group(2) else n - 1
        else:
            a, b = max(0, n - int(m.group(2))), n - 1
        if a >= n or b < a:
            return 200, body
        extra.append(["Content-Range", "bytes %d-%d/%d" % (a, b, n)])
        return 206, body[a:b + 1]

    def send_conventional(self, s, method, segs, query, req_headers, rec,
                          base, keep, reader=None):
        status = 200
        body = None
        mode = "length"       # length | chunked | no-length | slow | mid
        #                       | stall | stream
        slow_ms = 0
        stream_n = 0
        idle_close_ms = None
        extra_resp_n = 0
        extra = []
        seed = None
        head_mode = None      # slow | stall | close | reset
        slow_head_ms = 0
        malformed = None
        extra_n = 0
        smuggle = False
        rate = 0
        ranges = False
        die_at = None
        stall_at = None
        i = 0
        while i < len(segs):
            d = segs[i]
            arg = segs[i + 1] if i + 1 < len(segs) else None
            if d == "slow-head" and num(arg) is not None:
                head_mode, slow_head_ms = "slow", num(arg)
                i += 1
            elif d in ("head-stall", "head-close", "head-reset"):
                head_mode = d[5:]
            elif d in ("silent-after-head", "reset-mid-body") \
                    and num(arg) is not None:
                body = pattern(num(arg))
                mode = "silent" if d == "silent-after-head" else "rmid"
                i += 1
            elif d == "malformed" and arg is not None:
                malformed = arg
                i += 1
            elif d == "extra" and num(arg) is not None:
                extra_n = num(arg)
                i += 1
            elif d == "smuggle":
                smuggle = True
            elif d == "rate" and num(arg) is not None:
                rate = num(arg)
                i += 1
            elif d == "die-at" and num(arg) is not None:
                die_at = num(arg)
                i += 1
            elif d == "stall-at" and num(arg) is not None:
                stall_at = num(arg)
                i += 1
            elif d == "seed" and arg is not None:
                seed = arg
                i += 1
            elif d == "status" and num(arg) is not None:
                status = num(arg)
                i += 1
            elif d == "bytes" and num(arg) is not None:
                body, mode = pattern(num(arg)), "length"
                i += 1
            elif d == "chunked" and num(arg) is not None:
                body, mode = pattern(num(arg)), "chunked"
                i += 1
            elif d == "no-length" and num(arg) is not None:
                body, mode = pattern(num(arg)), "no-length"
                i += 1
            elif d == "no-length":
                body, mode = pattern(100), "no-length"
            elif d == "delay" and num(arg) is not None:
                time.sleep(num(arg) / 1000.0)
                i += 1
            elif d == "slow-body" and num(arg) is not None:
                body, mode = pattern(num(arg)), "slow"
                ms = segs[i + 2] if i + 2 < len(segs) else None
                slow_ms = num(ms) or 100
                i += 2 if num(ms) is not None else 1
            elif d == "close-mid-body":
                n = num(arg)
                if n is not None:
                    i += 1
                body, mode = pattern(n or 1000), "mid"
            elif d == "close":
                return False
            elif d == "hang":
                if reader is not None:
                    reader.peer_closed = reader.wait_peer_close()
                return False
            elif d == "stall":
                n = num(arg)
                if n is not None:
                    i += 1
                body, mode = pattern(n or 1000), "stall"
            elif d == "stream" and num(arg) is not None:
                stream_n, mode = num(arg), "stream"
                body = b""
                i += 1
            elif d == "extra-resp" and num(arg) is not None:
                extra_resp_n = num(arg)
                i += 1
            elif d == "blank-lines":
                s.settimeout(120)
                try:
                    line = b"\r\n" * 512
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline:
                        s.sendall(line)
                except OSError:
                    pass
                return False
            elif d == "bad-head" and num(arg) is not None:
                s.sendall(BAD_HEADS[num(arg) % len(BAD_HEADS)])
                return False
            elif d == "drop-next":
                if reader is not None:
                    reader.drop_next = True
            elif d == "close-idle" and num(arg) is not None:
                idle_close_ms = num(arg)
                i += 1
            elif d == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
                return False
            elif d == "conn-close":
                keep = False
            elif d == "headers":
                extra += [[k, v] for k, v in query]
            elif d == "etag" and arg is not None:
                tag = '"%s"' % arg
                extra.append(["ETag", tag])
                inm = hget(req_headers, "If-None-Match")
                if inm and (inm.strip() == "*" or tag in
                            [x.strip().lstrip("W/") for x in inm.split(",")]):
                    status = 304
                i += 1
            elif d == "last-modified" and num(arg) is not None:
                t = num(arg)
                extra.append(["Last-Modified", formatdate(t, usegmt=True)])
                ims = hget(req_headers, "If-Modified-Since")
                if ims and not hget(req_headers, "If-None-Match"):
                    try:
                        if parsedate_to_datetime(ims).timestamp() >= t:
                            status = 304
                    except (TypeError, ValueError):
                        pass
                i += 1
            elif d == "echo":
                body = json.dumps(rec).encode()
                mode = "length"
            elif d == "ranges":
                ranges = True
            i += 1
        if body is None:
            body = ("%s %s\n" % (rec["method"], rec["target"])).encode(
                "latin-1")
        elif seed is not None and mode in ("length", "chunked", "no-length",
                                           "slow", "mid", "stall", "silent",
                                           "rmid") \
                and body == pattern(len(body)):
            body = seeded(seed, len(body))
        if ranges and mode in ("length", "slow", "mid") and status == 200:
            status, body = self._range(hget(req_headers, "Range"), body, extra)
        bodyless = status in (204, 304) or 100 <= status < 200
        headers = base + [["Content-Type", "text/plain"]]
        names = {k.lower() for k, v in extra}
        headers += extra
        if bodyless:
            pass
        elif mode == "chunked":
            headers.append(["Transfer-Encoding", "chunked"])
        elif mode == "no-length":
            keep = False
        elif mode == "stream" and "content-length" not in names:
            headers.append(["Content-Length", str(stream_n)])
        elif "content-length" not in names:
            headers.append(["Content-Length", str(len(body))])
        if mode in ("mid", "stall", "silent", "rmid"):
            keep = False
        if not keep and "connection" not in names:
            headers.append(["Connection", "close"])
        elif (keep and rec["version"] == "HTTP/1.0"
              and "connection" not in names):
            headers.append(["Connection", "keep-alive"])
        if malformed is not None:
            return self.send_malformed(s, malformed, status, headers, body,
                                       reader)
        out = self._head_bytes(status, "X" if status != 200 else "OK",
                               headers)
        if head_mode is not None:
            if not self.send_head_badly(s, out, head_mode, slow_head_ms,
                                        reader):
                return False
            out = b""
        if method == "HEAD" or bodyless:
            s.sendall(out)
            return keep
        if mode == "length" and (extra_n or smuggle):
            more = b"X" * extra_n
            if smuggle:
                more += (b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n"
                         b"Cache-Control: max-age=600\r\n\r\n"
                         b"SMUGGLED-RESPONSE!!\n")
            s.sendall(out + body + more)
            return keep
        if mode == "silent":
            s.sendall(out)
            if reader is not None:
                reader.peer_closed = reader.wait_peer_close()
            return False
        if mode == "rmid":
            s.sendall(out + body[:len(body) // 2])
            time.sleep(0.05)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                         b"\x01\x00\x00\x00\x00\x00\x00\x00")
            return False
        if mode == "chunked":
            parts = [out]
            for j in range(0, len(body), 1024):
                c = body[j:j + 1024]
                parts.append(b"%x\r\n%s\r\n" % (len(c), c))
            parts.append(b"0\r\n\r\n")
            s.sendall(b"".join(parts) + self._extra(extra_resp_n))
        elif mode == "slow":
            s.sendall(out)
            step = max(1, (len(body) + 9) // 10)
            for j in range(0, len(body), step):
                if j:
                    time.sleep(slow_ms / 1000.0)
                s.sendall(body[j:j + step])
        elif mode == "mid":
            s.sendall(out + body[:len(body) // 2])
            return False
        elif mode == "stall":
            s.sendall(out + body[:len(body) // 2])
            if reader is not None:
                reader.peer_closed = reader.wait_peer_close()
            return False
        elif mode == "stream":
            s.sendall(out)
            piece = 256 * 1024
            if rate:
                piece = max(4, min(64 * 1024, rate // 2) // 4 * 4)
            gen = random.Random("cistern-seed:" + str(seed)) \
                if seed is not None else None
            for j in range(0, stream_n, piece):
                if die_at is not None and j >= stream_n * die_at // 100:
                    return False
                if stall_at is not None and j >= stream_n * stall_at // 100:
                    if reader is not None:
                        reader.peer_closed = reader.wait_peer_close()
                    return False
                n = min(piece, stream_n - j)
                # pieces are multiples of 4 bytes, so the seeded pieces
                # concatenate to seeded(seed, stream_n)
                s.sendall(gen.randbytes(n) if gen else pattern(n, j))
                if rate:
                    time.sleep(n / float(rate))
        else:
            s.sendall(out + body + self._extra(extra_resp_n))
        if keep and idle_close_ms is not None and reader is not None:
            # Keep the connection open (no Connection: close) but drop it
            # after idle_close_ms of silence, as origins with a short
            # keep-alive timeout do.
            reader.sock.settimeout(idle_close_ms / 1000.0)
            try:
                data = reader.sock.recv(65536)
            except socket.timeout:
                return False
            finally:
                reader.sock.settimeout(None)
            if not data:
                reader.peer_closed = True
                return False
            reader.buf += data
        return keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    a = ap.parse_args()
    o = Origin(a.host, a.port)
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % o.port)
        os.rename(tmp, a.port_file)
    else:
        print(o.port, flush=True)
    try:
        o.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
