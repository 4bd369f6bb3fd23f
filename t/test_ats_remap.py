#!/usr/bin/env python3
"""t/test_ats_remap.py: remap.config's ACL filters and rule types as ATS
writes them (issue 18): @action=allow|deny with @src_ip= (ranges, ~),
@in_ip=, @method=, named filters (.definefilter, .activatefilter,
.deactivatefilter, .deletefilter), map_with_recv_port, regex_redirect; the
@options Cistern does not implement refused with file:line; a denied
request's body never read as a request; a reload that adds a deny.

Clients bind 127.0.0.2 and friends as their source address (the loopback
interface takes all of 127/8), and connect to 127.0.0.2 to reach the
daemon on another local address (it listens on 0.0.0.0)."""
import socket

import harness
from harness import Cistern, Origin, check_config, parse_responses, expect, \
    expect_eq, expect_in


def req(port, method="GET", path="/", host="a.test", src=None,
        dst="127.0.0.1", body=None):
    """One request on its own connection (Connection: close) from source
    address src to dst:port; returns the parsed response."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    try:
        if src:
            s.bind((src, 0))
        s.connect((dst, port))
        head = "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n" % (
            method, path, host)
        if body is not None:
            head += "Content-Length: %d\r\n" % len(body)
        s.sendall(head.encode() + b"\r\n" + (body or b""))
        data = b""
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    finally:
        s.close()
    rs = parse_responses(data, methods=[method])
    expect_eq(len(rs), 1, "responses to %s %s from %s" % (method, path, src))
    return rs[0]


def status(port, **kw):
    return req(port, **kw).status


def test_deny_src_ip():
    """ATS's own example: deny one address, everyone else goes through."""
    with Origin() as o, Cistern(remap=[
            "map http://a.test/ http://%s/ @action=deny @src_ip=127.0.0.1"
            % o.authority]) as c:
        r = req(c.port, src="127.0.0.1")
        expect_eq(r.status, 403, "127.0.0.1 (denied)")
        expect_in(b"Access Denied", r.body, "403 body")
        expect_eq(len(o.requests()), 0, "origin requests after the refusal")
        expect_eq(status(c.port, src="127.0.0.2"), 200, "127.0.0.2")
        expect_eq(len(o.requests()), 1, "origin requests")
        c.wait_log(r"from 127\.0\.0\.1: GET denied by .*remap\.config:1 "
                   r"\(filter in-line\)")


def test_src_ip_negation_and_ranges():
    with Origin() as o, Cistern(remap=[
            # everyone but 127.0.0.2 is denied
            "map http://a.test/ http://%s/ @action=deny @src_ip=~127.0.0.2"
            % o.authority,
            # only a range, a CIDR block and one address are allowed
            "map http://b.test/ http://%s/ @action=allow "
            "@src_ip=127.0.0.3-127.0.0.4 @src_ip=127.0.1.0/24 @src_ip=127.0.0.9"
            % o.authority]) as c:
        expect_eq(status(c.port, src="127.0.0.2"), 200, "a: 127.0.0.2")
        expect_eq(status(c.port, src="127.0.0.1"), 403, "a: 127.0.0.1")
        expect_eq(status(c.port, src="127.0.0.5"), 403, "a: 127.0.0.5")
        for src, want in (("127.0.0.1", 403), ("127.0.0.3", 200),
                          ("127.0.0.4", 200), ("127.0.0.5", 403),
                          ("127.0.1.77", 200), ("127.0.2.1", 403),
                          ("127.0.0.9", 200)):
            expect_eq(status(c.port, host="b.test", src=src), want,
                      "b: " + src)


def test_method():
    with Origin() as o, Cistern(remap=[
            "map http://a.test/ http://%s/ @action=allow @method=GET "
            "@method=head" % o.authority,
            "map http://b.test/ http://%s/ @action=deny @method=PUT "
            "@src_ip=127.0.0.1" % o.authority]) as c:
        expect_eq(status(c.port, method="GET"), 200, "a: GET")
        expect_eq(status(c.port, method="HEAD"), 200, "a: HEAD")
        expect_eq(status(c.port, method="POST", body=b"x"), 403, "a: POST")
        expect_eq(status(c.port, method="DELETE"), 403, "a: DELETE")
        expect_eq(status(c.port, host="b.test", method="PUT", body=b"x",
                         src="127.0.0.1"), 403, "b: PUT from 127.0.0.1")
        expect_eq(status(c.port, host="b.test", method="PUT", body=b"x",
                         src="127.0.0.2"), 200, "b: PUT from 127.0.0.2")
        expect_eq(status(c.port, host="b.test", method="GET",
                         src="127.0.0.1"), 200, "b: GET from 127.0.0.1")


def test_in_ip():
    """@in_ip= is the local address the client connected to."""
    with Origin() as o, Cistern(remap=[
            "map http://a.test/ http://%s/ @action=allow @in_ip=127.0.0.2"
            % o.authority,
            "map http://b.test/ http://%s/ @action=deny @in_ip=127.0.0.2"
            % o.authority]) as c:
        expect_eq(status(c.port, dst="127.0.0.2"), 200, "a: to 127.0.0.2")
        expect_eq(status(c.port, dst="127.0.0.1"), 403, "a: to 127.0.0.1")
        expect_eq(status(c.port, host="b.test", dst="127.0.0.2"), 403,
                  "b: to 127.0.0.2")
        expect_eq(status(c.port, host="b.test", dst="127.0.0.1"), 200,
                  "b: to 127.0.0.1")


# ip_allow.config's built-in rules deny DELETE to all but 127.0.0.1 and ::1
OPEN_IP_ALLOW = ["src_ip=0.0.0.0-255.255.255.255 action=ip_allow method=ALL"]


def test_named_filters():
    with Origin() as o, Cistern(ip_allow=OPEN_IP_ALLOW, remap=[
            ".definefilter no_delete @action=deny @method=DELETE",
            ".definefilter only_two @action=allow @src_ip=127.0.0.2",
            "map http://open.test/ http://%s/" % o.authority,
            ".activatefilter no_delete",
            "map http://nd.test/ http://%s/" % o.authority,
            ".activatefilter only_two",
            "map http://both.test/ http://%s/" % o.authority,
            ".deactivatefilter no_delete",
            "map http://two.test/ http://%s/" % o.authority,
            ".deletefilter only_two",
            "map http://none.test/ http://%s/" % o.authority,
            ]) as c:
        def st(host, method="GET", src="127.0.0.1"):
            return status(c.port, host=host, method=method, src=src)
        expect_eq(st("open.test", "DELETE"), 200, "open.test DELETE")
        expect_eq(st("nd.test", "DELETE"), 403, "nd.test DELETE")
        expect_eq(st("nd.test", "GET"), 200, "nd.test GET")
        expect_eq(st("both.test", "GET"), 403, "both.test GET from .1")
        expect_eq(st("both.test", "GET", "127.0.0.2"), 200,
                  "both.test GET from .2")
        expect_eq(st("both.test", "DELETE", "127.0.0.2"), 403,
                  "both.test DELETE from .2")
        expect_eq(st("two.test", "DELETE", "127.0.0.2"), 200,
                  "two.test DELETE from .2 (no_delete deactivated)")
        expect_eq(st("two.test", "GET"), 403, "two.test GET from .1")
        expect_eq(st("none.test", "DELETE"), 200,
                  "none.test (only_two deleted, no_delete inactive)")
        c.wait_log(r"from 127\.0\.0\.1: GET denied by .*remap\.config:7 "
                   r"\(filter only_two\)")


def test_unknown_and_unsupported_options_are_errors():
    for line, msg in (
            ("map http://a.test/ http://o.test/ @frobnicate=1",
             'remap.config:1: unknown option "@frobnicate=1"'),
            ("map http://a.test/ http://o.test/ @plugin=gen.so @pparam=x",
             "remap.config:1: plugin gen.so: cannot load"),
            ("map_with_referer http://a.test/ http://o.test/ http://r.test/ .*",
             "remap.config:1: map_with_referer: the Referer check "
             "(deep-linking protection) is not supported"),
            (".deactivatefilter ip_allow",
             "remap.config:1: .deactivatefilter ip_allow: lifting "
             "ip_allow.config for some rules is not supported"),
            ("map http://a.test/ http://o.test/ @action=deny @src_ip=1.2.3",
             'remap.config:1: "@src_ip=1.2.3": bad address'),
            # ATS's cache inspector: it routed to a host named "{cache}"
            ("map http://a.test/ http://{cache}",
             'remap.config:1: "{cache}": ATS\'s internal pages')):
        r = check_config(remap=[line])
        expect(r.rc != 0, "cistern -t accepted %r" % line)
        expect_in(msg, r.stderr, "cistern -t on %r" % line)
    r = check_config(remap=[
        "map http://a.test/ http://o.test/ @action=deny @src_ip=127.0.0.1"
        " @src_ip=::1 @method=POST @in_ip=127.0.0.1 @internal"])
    expect_eq(r.rc, 0, "cistern -t on a full filter: " + r.stderr)


def test_method_list_in_one_option_is_an_error():
    """@method= takes one method; "PUT,DELETE" (or ip_allow.config's
    "PUT|DELETE") was kept as one odd name that no request carries, so the
    deny filter denied nothing.  It is an error with file:line, in-line and
    in a named filter."""
    for line in ("map http://a.test/ http://o.test/ @action=deny @method=PUT,DELETE",
                 ".definefilter f @action=deny @method=PUT|DELETE"):
        r = check_config(remap=["map http://z.test/ http://o.test/", line])
        expect_eq(r.rc, 1, "cistern -t on %r (stderr:\n%s)" % (line, r.stderr))
        expect_in("remap.config:2: \"@method=PUT", r.stderr, "cistern -t")
        expect_in("not a method name", r.stderr, "cistern -t")
    r = check_config(remap=["map http://a.test/ http://o.test/ @action=deny "
                            "@method=PROPFIND @method=purge"])
    expect_eq(r.rc, 0, "extension and lower-case methods: " + r.stderr)


def test_method_all_is_an_error():
    """ip_allow's ALL is no method to a remap filter: ATS (and Cistern)
    kept @method=ALL as a method named "ALL", so "@action=deny
    @method=ALL" denied nothing.  It is an error with file:line."""
    r = check_config(remap=["map http://a.test/ http://o.test/ @action=deny "
                            "@src_ip=127.0.0.2 @method=ALL"])
    expect_eq(r.rc, 1, "cistern -t (stderr:\n%s)" % r.stderr)
    expect_in('remap.config:1: "@method=ALL": a filter has no ALL', r.stderr,
              "cistern -t")


def test_filtered_rule_behind_an_earlier_one_is_an_error():
    """The first matching rule of its class wins (ATS: the earliest rule
    among the path prefixes that match), so "map http://a.test/admin/ ...
    @action=deny" after "map http://a.test/ ..." never matched: /admin/
    was served to everyone, in ATS and in Cistern.  A rule with a filter
    that an earlier rule shadows is an error with file:line naming it; one
    without a filter (it only routes) is a warning; the same path on
    another host, scheme or port, or before the wider rule, is fine."""
    r = check_config(remap=[
        "map http://a.test/ http://o.test/",
        "map http://a.test/admin/ http://o.test/admin/ @action=deny @src_ip=all"])
    expect_eq(r.rc, 1, "cistern -t (stderr:\n%s)" % r.stderr)
    expect_in("remap.config:2: this rule never matches: line 1 (map "
              "http://a.test/) takes every request it would", r.stderr, "cistern -t")
    r = check_config(remap=[
        ".definefilter staff @action=allow @src_ip=10.0.0.0/8",
        "map http://A.test/ http://o.test/",
        ".activatefilter staff",
        "map http://a.test/admin http://o.test/admin",
        ".deactivatefilter staff"])
    expect_eq(r.rc, 1, "cistern -t, named filter (stderr:\n%s)" % r.stderr)
    expect_in("remap.config:4: this rule never matches: line 2", r.stderr, "cistern -t")
    r = check_config(remap=[
        "regex_map http://.*\\.a\\.test/ http://o.test/",
        "map http://x.a.test/admin/ http://o.test/ @action=deny @src_ip=all"])
    expect_eq(r.rc, 1, "cistern -t, a host pattern first (stderr:\n%s)" % r.stderr)
    expect_in("remap.config:2: this rule never matches: line 1 (regex_map", r.stderr,
              "cistern -t")
    r = check_config(remap=[
        "map http://a.test/admin/ http://o.test/admin/ @action=deny @src_ip=all",
        "map http://a.test/ http://o.test/",
        "map http://b.test/admin/ http://o.test/ @action=deny @src_ip=all",
        "map https://a.test/admin/ http://o.test/ @action=deny @src_ip=all",
        "map http://a.test:8080/admin/ http://o.test/ @action=deny @src_ip=all",
        "redirect http://a.test/admin/x http://o.test/ @action=deny @src_ip=all",
        "map http://a.test/x/ http://o.test/x/",
        "regex_map http://.\\.b\\.test/ http://o.test/",
        "map http://xy.b.test/ http://o.test/ @action=deny @src_ip=all"])
    expect_eq(r.rc, 0, "cistern -t, nothing shadowed with a filter (stderr:\n%s)"
              % r.stderr)
    expect_in("warning: ", r.stderr, "cistern -t")
    expect_in("remap.config:7: this rule never matches: line 2", r.stderr,
              "cistern -t")


def test_recv_port():
    """map_with_recv_port: the port the connection came in on picks the
    rule, whatever the Host header says."""
    with Origin() as o, Cistern(
            records={"proxy.config.http.server_ports": "0 0"},
            remap=["map http://a.test/ http://%s/plain/" % o.authority]) as c:
        expect_eq(len(c.ports), 2, "listening ports")
        p1, p2 = c.ports
        c.write_file("remap.config", [
            "map http://a.test/ http://%s/plain/" % o.authority,
            "map_with_recv_port http://a.test:%d/ http://%s/one/"
            % (p1, o.authority),
            "map_with_recv_port http://a.test:%d/ http://%s/two/"
            % (p2, o.authority)])
        c.reload(wait_log=r"reload ok")
        r1 = req(p1, path="/x", host="a.test:%d" % p2)
        r2 = req(p2, path="/x", host="a.test")
        expect_in(b"GET /one/x", r1.body, "port 1's origin request")
        expect_in(b"GET /two/x", r2.body, "port 2's origin request")
        r3 = req(p1, path="/x", host="b.test")
        expect_eq(r3.status, 404, "another host on port 1")


def test_regex_redirect():
    with Cistern(remap=[
            r"regex_redirect http://old\.(.*)\.test/ http://new.$1.test/",
            "redirect http://old.b.test/ http://exact.test/",
            r"regex_redirect_temporary http://tmp\.(.*)\.test/ "
            r"https://t.$1.test/"]) as c:
        r = req(c.port, path="/p?q=1", host="old.a.test")
        expect_eq(r.status, 301, "regex_redirect status")
        expect_eq(r.header("Location"), "http://new.a.test/p?q=1", "Location")
        r = req(c.port, path="/p", host="old.b.test")
        expect_eq(r.header("Location"), "http://exact.test/p",
                  "redirect before regex_redirect")
        r = req(c.port, path="/", host="tmp.z.test")
        expect_eq(r.status, 307, "regex_redirect_temporary status")
        expect_eq(r.header("Location"), "https://t.z.test/", "Location")


def test_regex_host_with_a_bracket_expression():
    """A regex rule's host is a pattern, where '[' opens a bracket
    expression ("[a-z]+", as ATS's regex_map examples write), never an
    IPv6 literal; it was refused as a bad IPv6 address."""
    with Cistern(remap=[r"regex_redirect http://[a-z]+\.c\.test/ http://new.test/"]) as c:
        expect_eq(req(c.port, host="abc.c.test").status, 301, "abc.c.test")
        expect_eq(req(c.port, host="a1.c.test").status, 404, "a1.c.test")


def test_denied_post_body_not_parsed():
    """A denied POST's body is read and dropped, never taken for the next
    request: exactly two answers to POST + pipelined GET."""
    inner = b"GET /smuggled HTTP/1.1\r\nHost: ok.test\r\n\r\n"
    with Origin() as o, Cistern(remap=[
            "map http://a.test/ http://%s/ @action=deny @src_ip=127.0.0.1"
            % o.authority,
            "map http://ok.test/ http://%s/" % o.authority]) as c:
        conn = harness.Conn(c.port)
        conn.send(b"POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n"
                  b"\r\n" % len(inner) + inner
                  + b"GET /next HTTP/1.1\r\nHost: ok.test\r\n"
                  b"Connection: close\r\n\r\n")
        conn.read_until_close(10)
        rs = parse_responses(conn.buf, methods=["POST", "GET"])
        conn.close()
        expect_eq([r.status for r in rs], [403, 200], "statuses")
        targets = [q["target"] for q in o.requests()]
        expect_eq(targets, ["/next"], "what reached the origin")


def test_reload_adds_deny():
    with Origin() as o, Cistern(remap=[
            "map http://a.test/ http://%s/" % o.authority]) as c:
        expect_eq(status(c.port, src="127.0.0.1"), 200, "before the reload")
        c.write_file("remap.config", [
            ".definefilter block @action=deny @src_ip=127.0.0.1",
            ".activatefilter block",
            "map http://a.test/ http://%s/" % o.authority])
        c.reload(wait_log=r"reload ok")
        harness.wait_for(lambda: status(c.port, src="127.0.0.1") == 403,
                         timeout=10, what="the deny to take effect")
        expect_eq(status(c.port, src="127.0.0.2"), 200, "127.0.0.2 after")


if __name__ == "__main__":
    harness.main()
