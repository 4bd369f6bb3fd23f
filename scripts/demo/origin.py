#!/usr/bin/env python3
"""Cistern's demo origin: a tiny HTTP/1.1 keep-alive server (stdlib only).

Paths:
  /          a small HTML page, Cache-Control: max-age=60
  /big       1 MiB of text, max-age=60
  /time      the current time, Cache-Control: no-store
  /kib/N     N KiB of text (0 <= N <= 65536), max-age=60
anything else: 404.

--port 0 picks a free port; --port-file FILE receives the actual port (written
atomically once the socket listens), so a script never has to guess it.
"""

import argparse
import datetime
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b"""<!doctype html>
<html><head><title>Cistern demo origin</title></head>
<body>
<h1>Hello from the demo origin</h1>
<p>This page is served by scripts/demo/origin.py with
<code>Cache-Control: max-age=60</code>.</p>
<ul>
<li><a href="/big">/big</a>: 1 MiB</li>
<li><a href="/time">/time</a>: the time, never cached</li>
<li><a href="/kib/64">/kib/64</a>: 64 KiB</li>
</ul>
</body></html>
"""

MIB = 1 << 20
LINE = b"Cistern demo origin filler line, 64 bytes long, for size tests.\n"
assert len(LINE) == 64


def filler(size):
    """size bytes of text (whole 64-byte lines, then a cut one)."""
    reps, rest = divmod(size, len(LINE))
    return LINE * reps + LINE[:rest]


BIG = filler(MIB)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cistern-demo-origin/1"
    quiet = False
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle plus
    # the client's delayed ACK adds 40 ms to every keep-alive response.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # noqa: N802 (stdlib name)
        if not self.quiet:
            sys.stderr.write("origin: %s %s\n" % (self.address_string(),
                                                  fmt % args))

    def send_body(self, status, ctype, body, cache_control=None):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if cache_control:
            self.send_header("Cache-Control", cache_control)
        if self.request_version == "HTTP/1.0" and not self.close_connection:
            # An HTTP/1.0 client (ab -k) keeps the connection only when told.
            self.send_header("Connection", "keep-alive")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def route(self):
        path = self.path.split("?", 1)[0]
        if path == "/":
            return 200, "text/html; charset=utf-8", PAGE, "max-age=60"
        if path == "/big":
            return 200, "text/plain", BIG, "max-age=60"
        if path == "/time":
            now = datetime.datetime.now(datetime.timezone.utc).isoformat()
            return 200, "text/plain", (now + "\n").encode(), "no-store"
        if path.startswith("/kib/"):
            try:
                n = int(path[5:])
            except ValueError:
                n = -1
            if 0 <= n <= 65536:
                return 200, "text/plain", filler(n * 1024), "max-age=60"
        return 404, "text/plain", b"not found\n", None

    def do_GET(self):  # noqa: N802
        self.send_body(*self.route())

    def do_HEAD(self):  # noqa: N802
        self.send_body(*self.route())


def main():
    ap = argparse.ArgumentParser(description="Cistern's demo origin server.")
    ap.add_argument("--port", type=int, default=8081,
                    help="TCP port (0: pick a free one; default 8081)")
    ap.add_argument("--bind", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1)")
    ap.add_argument("--port-file",
                    help="write the actual port to this file once listening")
    ap.add_argument("--quiet", action="store_true",
                    help="do not log each request")
    args = ap.parse_args()

    Handler.quiet = args.quiet
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    try:
        srv = ThreadingHTTPServer((args.bind, args.port), Handler)
    except OSError as e:
        sys.exit("origin: cannot listen on %s:%d: %s" %
                 (args.bind, args.port, e.strerror))
    port = srv.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, args.port_file)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    sys.stderr.write("origin: listening on http://%s:%d/\n" % (args.bind, port))
    sys.stderr.flush()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
