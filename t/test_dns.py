#!/usr/bin/env python3
"""End-to-end tests of origin name resolution (issue 20): every A and AAAA
address of a name, cached for the answer's TTL, a failed address left for
the next one at once, the outbound ip_allow rules on each address, and
proxy.config.dns.nameservers / hostdb.host_file.path.

The names are answered by DnsServer below, a small UDP DNS server run by the
test (standard library only) that answers A and AAAA questions from a table
with chosen TTLs, NXDOMAIN (with an SOA whose minimum is the negative TTL)
for names not in it, and counts the questions per (name, type).  Cistern is
pointed at it with proxy.config.dns.nameservers, and at a hosts file of the
test's own (an empty one unless a test says otherwise), so nothing depends on
the machine's resolver.  One worker, so one cache sees every request.

Addresses: 127/8 is all loopback, so an address where nothing listens on the
origin's port (127.0.0.2 beside an origin on 127.0.0.1) is refused at once;
the test binds it without listening (Refusing), so that no other process
on the machine can be listening there.
"""

import re
import socket
import struct
import threading
import time

import harness
from harness import (Cistern, Origin, ab, check_config, curl, expect,
                     expect_eq, expect_in, one_request)

HOST = "a.test"
T_A, T_AAAA, T_SOA = 1, 28, 6


class DnsServer:
    """A UDP DNS server on 127.0.0.1 (kernel-chosen port) answering from
    table: {name: {"A": [ip...], "AAAA": [ip...], "ttl": seconds, "mute":
    [types never answered]}}.  Names
    are matched without regard to case (evdns randomizes the case of its
    questions, and checks the answer echoes it).  .queries[(name, type)]
    counts the questions; .total() sums them."""

    def __init__(self, table, neg_ttl=5):
        self.table = {k.lower(): v for k, v in table.items()}
        self.neg_ttl = neg_ttl
        self.queries = {}
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)   # (a close does not wake recvfrom)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stopping = True
        self.sock.close()
        self.thread.join(timeout=5)

    def count(self, name, qtype):
        with self.lock:
            return self.queries.get((name.lower(), qtype), 0)

    def total(self):
        with self.lock:
            return sum(self.queries.values())

    def _serve(self):
        while not self.stopping:
            try:
                data, peer = self.sock.recvfrom(2048)
            except socket.timeout:
                continue
            except OSError:
                return
            reply = self._answer(data)
            if reply is not None:
                try:
                    self.sock.sendto(reply, peer)
                except OSError:
                    return

    def _answer(self, data):
        if len(data) < 12:
            return None
        qid, flags, qd = struct.unpack("!HHH", data[:6])
        if qd != 1 or flags & 0x8000:
            return None
        i, labels = 12, []
        while i < len(data) and data[i] != 0:
            n = data[i]
            labels.append(data[i + 1:i + 1 + n].decode("ascii", "replace"))
            i += 1 + n
        i += 1
        if i + 4 > len(data):
            return None
        qtype, qclass = struct.unpack("!HH", data[i:i + 4])
        question = data[12:i + 4]
        name = ".".join(labels).lower()
        with self.lock:
            self.queries[(name, qtype)] = self.queries.get((name, qtype), 0) + 1
        entry = self.table.get(name)
        if entry is not None and qtype in entry.get("mute", ()):
            return None                                 # never answered
        answers, auth, rcode = [], [], 0
        if entry is None:
            rcode = 3                                   # NXDOMAIN
        else:
            ttl = entry.get("ttl", 60)
            if qtype == T_A:
                for ip in entry.get("A", []):
                    answers.append(self._rr(T_A, ttl, socket.inet_pton(socket.AF_INET, ip)))
            elif qtype == T_AAAA:
                for ip in entry.get("AAAA", []):
                    answers.append(self._rr(T_AAAA, ttl, socket.inet_pton(socket.AF_INET6, ip)))
        if not answers:
            # NXDOMAIN or NODATA: the SOA's minimum is the negative TTL
            soa = (b"\x02ns\x00" + b"\x04host\x00"
                   + struct.pack("!IIIII", 1, 60, 60, 60, self.neg_ttl))
            auth.append(self._rr(T_SOA, self.neg_ttl, soa))
        head = struct.pack("!HHHHHH", qid, 0x8180 | rcode, 1, len(answers), len(auth), 0)
        return head + question + b"".join(answers) + b"".join(auth)

    @staticmethod
    def _rr(rtype, ttl, rdata):
        # the name: a pointer to the question's (offset 12)
        return struct.pack("!HHHIH", 0xC00C, rtype, 1, ttl, len(rdata)) + rdata


def reserve(addr, port):
    """A TCP socket bound to addr:port and never listening: a connect there
    is refused, whoever else runs on this machine (without it, another
    process listening on that port would answer).  None when it is taken."""
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    try:
        sock.bind((addr, port))
    except OSError:
        sock.close()
        return None
    return sock


class Refusing:
    """Addresses (addrs) reserved on one port, each refusing connects: the
    port is the origin's (origin: an Origin, started again until its port
    is free on every addr) or, without an origin, a kernel-chosen one."""

    def __init__(self, addrs, origin_host=None):
        self.addrs, self.origin_host = addrs, origin_host
        self.origin, self.socks = None, []

    def __enter__(self):
        for _ in range(20):
            if self.origin_host is not None:
                self.origin = Origin(host=self.origin_host).__enter__()
                self.port = self.origin.port
            else:
                first = reserve(self.addrs[0], 0)
                self.port, self.socks = first.getsockname()[1], [first]
            rest = [reserve(a, self.port) for a in self.addrs[len(self.socks):]]
            if all(rest):
                self.socks += rest
                return self
            self._release(rest)
        raise harness.HarnessError("no port free on all of %s" % self.addrs)

    def _release(self, extra=()):
        for sk in list(self.socks) + [x for x in extra if x]:
            sk.close()
        self.socks = []
        if self.origin is not None:
            self.origin.__exit__(None, None, None)
            self.origin = None

    def __exit__(self, *exc):
        self._release()


def records(dns, hosts_path=None, extra=None):
    r = {"proxy.config.dns.nameservers": "127.0.0.1:%d" % dns.port,
         # every request its own origin connection and fetch, so each one
         # resolves and connects
         "proxy.config.http.cache.http": 0,
         "proxy.config.http.keep_alive_no_activity_timeout_out": 0}
    if hosts_path is not None:
        r["proxy.config.hostdb.host_file.path"] = hosts_path
    r.update(extra or {})
    return r


def cistern(dns, remap, extra=None, hosts="", **kw):
    """A one-worker Cistern resolving through dns, with a hosts file of its
    own (hosts: its text)."""
    files = dict(kw.pop("files", {}))
    files["hosts"] = hosts
    return Cistern(records=records(dns, "hosts", extra), remap=remap, workers=1,
                   files=files, **kw)


def get(c, path, host=HOST):
    r = one_request(c.port, "GET", path, host=host)
    expect(r is not None, "GET %s: no complete response" % path)
    return r


def connect_failures(c, addr):
    """Failed connects to addr (no port) in c's error log."""
    return len(re.findall(r"connect to origin \S+ \(%s\)" % re.escape(addr),
                          c.error_log()))


def test_first_address_refuses_second_serves():
    """A name with two A records, the first refusing (nothing listens on
    127.0.0.2), the second serving: ab -n 500 has no failure, every
    request reaches the origin, and the refusing address is tried once
    (then remembered as failed: later requests start with the good one)."""
    with Refusing(["127.0.0.2"], origin_host="127.0.0.1") as rf, \
            DnsServer({"two.test": {"A": ["127.0.0.2", "127.0.0.1"]}}) as d:
        o = rf.origin
        remap = ["map http://%s/ http://two.test:%d/" % (HOST, o.port)]
        with cistern(d, remap) as c:
            r = ab(["-n", "500", "-c", "4", "-H", "Host: " + HOST, c.url("/ab")])
            expect_eq(r.complete, 500, "complete requests")
            expect_eq(r.failed, 0, "failed requests")
            expect_eq(r.non2xx, 0, "non-2xx responses")
            expect_eq(len(o.requests()), 500, "requests at the origin")
            expect_eq(connect_failures(c, "127.0.0.2"), 1,
                      "connects to the refusing address (error log: %s)"
                      % c.error_log()[-2000:])
            expect_eq(d.count("two.test", T_A), 1, "A queries")


def test_a_and_aaaa():
    """Both families are used: a name with A 127.0.0.1 and AAAA ::1 reaches an
    origin listening only on ::1 (the A address refuses), and a name with
    only an AAAA record reaches it too; both were asked A and AAAA."""
    with Refusing(["127.0.0.1"], origin_host="::1") as rf, DnsServer({
            "both.test": {"A": ["127.0.0.1"], "AAAA": ["::1"]},
            "six.test": {"AAAA": ["::1"]}}) as d:
        o6 = rf.origin
        remap = ["map http://%s/ http://both.test:%d/" % (HOST, o6.port),
                 "map http://b.test/ http://six.test:%d/" % o6.port]
        with cistern(d, remap) as c:
            for i in range(5):
                expect_eq(get(c, "/both%d" % i).status, 200, "both.test %d" % i)
            expect_eq(get(c, "/six", host="b.test").status, 200, "six.test")
            expect_eq(len(o6.requests()), 6, "requests at the ::1 origin")
            for name in ("both.test", "six.test"):
                expect_eq((d.count(name, T_A), d.count(name, T_AAAA)), (1, 1),
                          "%s: A and AAAA queries" % name)
            expect_eq(connect_failures(c, "127.0.0.1"), 1,
                      "connects to the refused A address")


def test_ttl_honoured():
    """An answer is used for its TTL: a second request within it asks
    nothing; one after it asks again."""
    with Origin() as o, DnsServer({"ttl.test": {"A": ["127.0.0.1"], "ttl": 3}}) as d:
        remap = ["map http://%s/ http://ttl.test:%d/" % (HOST, o.port)]
        with cistern(d, remap) as c:
            expect_eq(get(c, "/1").status, 200, "first")
            expect_eq(d.count("ttl.test", T_A), 1, "A queries after the first")
            expect_eq(get(c, "/2").status, 200, "second")
            expect_eq(get(c, "/3").status, 200, "third")
            expect_eq(d.count("ttl.test", T_A), 1, "A queries within the TTL")
            time.sleep(4.2)
            expect_eq(get(c, "/4").status, 200, "after the TTL")
            expect_eq(d.count("ttl.test", T_A), 2, "A queries after the TTL")
            expect_eq(d.count("ttl.test", T_AAAA), 2, "AAAA queries after the TTL")


def test_aaaa_never_answered():
    """A server that answers A but never AAAA: the A answer is used half a
    second later (not after the resolver's 5 s timeout), and again when
    it is asked anew after the TTL."""
    with Origin() as o, DnsServer({"mute.test": {"A": ["127.0.0.1"], "ttl": 1,
                                                 "mute": [T_AAAA]}}) as d:
        remap = ["map http://%s/ http://mute.test:%d/" % (HOST, o.port)]
        with cistern(d, remap) as c:
            for i in range(2):
                t0 = time.monotonic()
                expect_eq(get(c, "/%d" % i).status, 200, "request %d" % i)
                took = time.monotonic() - t0
                expect(took < 4.0, "request %d took %.1f s" % (i, took))
                time.sleep(1.5)
            expect_eq(d.count("mute.test", T_A), 2, "A queries")


def test_name_that_does_not_resolve():
    """NXDOMAIN is 502, and is itself cached (the SOA minimum, 5 s): a
    second request asks nothing."""
    with DnsServer({}, neg_ttl=5) as d:
        remap = ["map http://%s/ http://nowhere.test:8080/" % HOST]
        with cistern(d, remap) as c:
            expect_eq(get(c, "/1").status, 502, "first")
            expect_eq(get(c, "/2").status, 502, "second")
            expect_eq(d.count("nowhere.test", T_A), 1, "A queries")
            expect_in("cannot resolve origin nowhere.test", c.error_log(), "error log")


def test_out_rule_denies_one_address():
    """An out rule denying one of a name's two addresses: that address is
    never connected to (a listener there counts), every request goes to the
    other; a name whose every address is denied is 403."""
    yaml = ("ip_allow:\n"
            "  - apply: in\n    ip_addrs: 0/0\n    action: allow\n    methods: ALL\n"
            "  - apply: out\n    ip_addrs: 127.0.0.3\n    action: deny\n    methods: ALL\n"
            "  - apply: out\n    ip_addrs: 0/0\n    action: allow\n    methods: ALL\n")
    with Origin() as o, DnsServer({
            "pair.test": {"A": ["127.0.0.3", "127.0.0.1"]},
            "denied.test": {"A": ["127.0.0.3"]}}) as d:
        trap = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        trap.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        trap.bind(("127.0.0.3", o.port))
        trap.listen(16)
        trap.setblocking(False)
        try:
            remap = ["map http://%s/ http://pair.test:%d/" % (HOST, o.port),
                     "map http://d.test/ http://denied.test:%d/" % o.port]
            with cistern(d, remap, files={"ip_allow.yaml": yaml}) as c:
                for i in range(20):
                    expect_eq(get(c, "/p%d" % i).status, 200, "pair.test %d" % i)
                expect_eq(get(c, "/d", host="d.test").status, 403, "denied.test")
                expect_eq(len(o.requests()), 20, "requests at 127.0.0.1")
                try:
                    trap.accept()
                    harness.fail("a connection reached the denied 127.0.0.3")
                except BlockingIOError:
                    pass
                expect_in("denied by", c.error_log(), "error log")
        finally:
            trap.close()


def test_every_address_down():
    """When every address of a name refuses, the request is 502 after each
    was tried in each round, and the origin is marked down."""
    with Refusing(["127.0.0.2", "127.0.0.3"]) as rf, \
            DnsServer({"dead.test": {"A": ["127.0.0.2", "127.0.0.3"]}}) as d:
        remap = ["map http://%s/ http://dead.test:%d/" % (HOST, rf.port)]
        with cistern(d, remap, extra={
                "proxy.config.http.connect_attempts_max_retries": 1}) as c:
            expect_eq(get(c, "/1").status, 502, "status")
            log = c.error_log()
            expect_eq((connect_failures(c, "127.0.0.2"), connect_failures(c, "127.0.0.3")),
                      (2, 2), "connects to each address (two rounds)")
            expect_in("dead.test:%d marked down" % rf.port, log, "error log")


def test_hosts_file_before_dns():
    """A name in the hosts file is answered from it (no question to DNS),
    every address of it (a refusing 127.0.0.2 first); an edit of the file is
    seen once its answer's 10 s are over."""
    with Refusing(["127.0.0.2"], origin_host="127.0.0.1") as rf, \
            Origin(host="127.0.0.4") as o4, DnsServer({}) as d:
        o = rf.origin
        remap = ["map http://%s/ http://h.test:%d/" % (HOST, o.port),
                 "map http://b.test/ http://h4.test:%d/" % o4.port]
        hosts = "# test\n127.0.0.2 h.test\n127.0.0.1 other h.test  # both\n"
        with cistern(d, remap, hosts=hosts) as c:
            expect_eq(get(c, "/1").status, 200, "h.test")
            expect_eq(get(c, "/2").status, 200, "h.test again")
            expect_eq(get(c, "/n", host="b.test").status, 502, "h4.test (not yet there)")
            c.write_file("hosts", hosts + "127.0.0.4 h4.test\n")
            time.sleep(11)
            expect_eq(get(c, "/y", host="b.test").status, 200, "h4.test after the edit")
            expect_eq(d.count("h.test", T_A), 0, "A queries for h.test")
            expect_eq(len(o.requests()), 2, "requests at 127.0.0.1")
            expect_eq(len(o4.requests()), 1, "requests at 127.0.0.4")


def test_nameservers_key():
    """proxy.config.dns.nameservers takes ATS's list ("IP[:PORT]" separated
    by spaces, commas or semicolons, "[v6]:PORT"), and a bad one is an error
    naming the file and line; a dead server listed first is skipped."""
    for good in ("NULL", "127.0.0.1", "127.0.0.1:5353 ::1", "10.0.0.1;[::1]:53,127.0.0.1:1"):
        r = check_config(records={"proxy.config.dns.nameservers": good})
        expect_eq(r.rc, 0, "cistern -t with %r: %s" % (good, r.stderr))
    for bad in ("127.0.0.1:0", "127.0.0.1:99999", "ns.example", "[::1", "1.2.3.4:x", ""):
        r = check_config(records={"proxy.config.dns.nameservers": bad})
        expect(r.rc != 0, "cistern -t accepted %r" % bad)
        expect_in("records.config:", r.stderr + r.stdout, "error for %r" % bad)
    # two servers: a dead one (nothing answers on the port) then ours
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))
    try:
        with Origin() as o, DnsServer({"ns.test": {"A": ["127.0.0.1"]}}) as d:
            remap = ["map http://%s/ http://ns.test:%d/" % (HOST, o.port)]
            extra = {"proxy.config.dns.nameservers":
                     "127.0.0.1:%d, 127.0.0.1:%d" % (dead.getsockname()[1], d.port)}
            with cistern(d, remap, extra=extra) as c:
                r = curl([c.url("/x"), "-H", "Host: " + HOST], timeout=30)
                expect_eq(r.status, 200, "through the second nameserver")
    finally:
        dead.close()


if __name__ == "__main__":
    harness.main()
