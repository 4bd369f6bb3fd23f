#!/usr/bin/env python3
"""End-to-end tests of ip_allow.yaml (ATS 9+) and outbound rules (issue 18).

Clients come from 127.0.0.1 or 127.0.0.2 (the client socket is bound to
the source address; all of 127/8 is loopback), so in-rules can tell two
clients apart.  Out rules (apply: out, or dest_ip= in ip_allow.config)
are checked on the origin's address before Cistern connects: a denied one
is answered 403 and the origin's request log must stay empty.
"""

import harness
from harness import (Cistern, Conn, Origin, expect, expect_eq, expect_in,
                     one_request, parse_responses)

HOST = "a.test"

# Debian 12's /etc/trafficserver/ip_allow.yaml (trafficserver 9.2.5+ds-0+deb12u4),
# byte for byte.
DEBIAN_IP_ALLOW_YAML = """\
# YAML
#
# ip_allow.yaml
#
# Documentation:
#    https://docs.trafficserver.apache.org/en/latest/admin-guide/files/ip_allow.yaml.en.html
#
# Rules:
# Each rule is a mapping, with the tags
#
#   apply: Either "in" or "out" to apply to inbound and outbound connections respectively.
#   ip_addrs: IP address ranges, either a single range or a list of ranges.
#   action: "allow" or "deny"
#   methods: A method name or sequence of method names. Available methods: GET, CONNECT, DELETE,
#            HEAD, OPTIONS, POST, PURGE, PUT, TRACE, PUSH. The special name "ALL" indicates all
#            methods and it overrides any other methods.
#
# A rule must have either "src" or "dst" to indicate if the IP addresses apply to inbound connections
# or outbound connections.
#
# The top level tag 'ip_allow' identifies the rule items. Its value must be a rule item or a
# sequence of rule items.
#
# Rules are applied in the order listed starting from the top.
# That means you generally want to append your rules after the ones listed here.
#
# Allow anything on localhost, limit destructive and debug methods elsewhere.
ip_allow:
  - apply: in
    ip_addrs: 127.0.0.1
    action: allow
    methods: ALL
  - apply: in
    ip_addrs: ::1
    action: allow
    methods: ALL
  - apply: in
    ip_addrs: 0/0
    action: deny
    methods:
      - PURGE
      - PUSH
      - DELETE
      - TRACE
  - apply: in
    ip_addrs: ::/0
    action: deny
    methods:
      - PURGE
      - PUSH
      - DELETE
      - TRACE
"""

# 127.0.0.2 may not GET (anything else it may); 127.0.0.1 may do anything;
# nobody else is covered, so everybody else is refused.
DENY_GET_YAML = """\
ip_allow:
  - apply: in
    ip_addrs: 127.0.0.2
    action: deny
    methods: GET
  - apply: in
    ip_addrs: [127.0.0.1, "::1"]
    action: allow
"""

ALLOW_ALL_YAML = """\
ip_allow:
  - {apply: in, ip_addrs: [0/0, "::/0"], action: allow}
"""


def remap_for(o, host=HOST):
    return ["map http://%s/ http://%s/" % (host, o.authority)]


def req(c, method, path, src="127.0.0.1", body=None, host=HOST):
    r = one_request(c.port, method, path, body=body, host=host, src=src)
    expect(r is not None, "%s %s from %s: no complete response" % (method, path, src))
    return r


def origin_targets(o):
    return [(r["method"], r["target"]) for r in o.requests()]


def test_debian_stock_ip_allow_yaml():
    """Debian 12's ip_allow.yaml passes `cistern -t` and behaves as in ATS:
    loopback 127.0.0.1 may PURGE, DELETE and TRACE; 127.0.0.2 (covered by
    the 0/0 deny rule) may not, and may GET and POST."""
    r = harness.check_config(files={"ip_allow.yaml": DEBIAN_IP_ALLOW_YAML})
    expect_eq(r.rc, 0, "cistern -t exit status: %s" % r.stderr)
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1,
                     files={"ip_allow.yaml": DEBIAN_IP_ALLOW_YAML}) as c:
            expect_eq(req(c, "GET", "/g1", src="127.0.0.2").status, 200, "GET from .2")
            expect_eq(req(c, "POST", "/p1", src="127.0.0.2", body=b"x").status, 200,
                      "POST from .2")
            for m in ("PURGE", "DELETE", "TRACE"):
                expect_eq(req(c, m, "/d1", src="127.0.0.2").status, 403, m + " from .2")
            # the same methods from 127.0.0.1: not refused by ip_allow (PURGE
            # of nothing stored is 404; DELETE goes to the origin)
            expect_eq(req(c, "PURGE", "/d1").status, 404, "PURGE from .1")
            expect_eq(req(c, "DELETE", "/d1").status, 200, "DELETE from .1")
            expect_eq(origin_targets(o), [("GET", "/g1"), ("POST", "/p1"),
                                          ("DELETE", "/d1")], "origin saw")
            log = c.error_log()
            expect_in("PURGE denied by ip_allow.yaml", log, "error log")


def test_custom_yaml_deny_get():
    """A deny rule denies the methods it lists and allows the others (ATS):
    127.0.0.2 gets 403 for GET and 200 for HEAD and POST; 127.0.0.1 gets
    everything; 127.0.0.3 is covered by no rule and is refused."""
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1,
                     files={"ip_allow.yaml": DENY_GET_YAML}) as c:
            expect_eq(req(c, "GET", "/a", src="127.0.0.2").status, 403, "GET from .2")
            expect_eq(req(c, "HEAD", "/b", src="127.0.0.2").status, 200, "HEAD from .2")
            expect_eq(req(c, "POST", "/c", src="127.0.0.2", body=b"y").status, 200,
                      "POST from .2")
            expect_eq(req(c, "GET", "/d").status, 200, "GET from .1")
            expect_eq(req(c, "GET", "/e", src="127.0.0.3").status, 403, "GET from .3")
            expect_eq([t for _, t in origin_targets(o)], ["/b", "/c", "/d"], "origin saw")


def test_malformed_yaml_is_file_line():
    """A YAML syntax error is `cistern -t` exit 1 with file:line and
    libyaml's words."""
    bad = ("ip_allow:\n"
           "  - apply: in\n"
           "    ip_addrs: 127.0.0.1\n"
           "   action: allow\n")
    r = harness.check_config(files={"ip_allow.yaml": bad})
    expect_eq(r.rc, 1, "cistern -t exit status")
    expect_in("ip_allow.yaml:4: did not find expected '-' indicator (while parsing "
              "a block collection started on line 2)", r.stderr, "cistern -t")


def test_unknown_key_is_an_error():
    """A key Cistern does not know in a rule (here ATS 8's "method" for
    "methods") is an error: read without it, the rule would allow every
    method."""
    text = ("ip_allow:\n"
            "  - apply: in\n"
            "    ip_addrs: 0/0\n"
            "    action: allow\n"
            "    method: GET\n")
    r = harness.check_config(files={"ip_allow.yaml": text})
    expect_eq(r.rc, 1, "cistern -t exit status")
    expect_in("ip_allow.yaml:5: unknown key \"method\" in a rule (expected apply, "
              "ip_addrs, action, methods)", r.stderr, "cistern -t")


# 127.0.0.2 may not PURGE or DELETE, written as a YAML list
DENY_PURGE_YAML = """\
ip_allow:
  - apply: in
    ip_addrs: 127.0.0.2
    action: deny
    methods: [PURGE, DELETE]
  - {apply: in, ip_addrs: [0/0, "::/0"], action: allow}
"""


def test_method_list_in_one_name_is_an_error():
    """`methods: PURGE, DELETE` is one YAML scalar, which ATS reads as one
    method named "PURGE, DELETE": the deny rule denied nothing and PURGE
    went through.  A method name that is not an HTTP token (a comma, a
    space, a ';') is an error with file:line, in both files, and a reload
    to such a file keeps the running rules."""
    yaml_bad = DENY_PURGE_YAML.replace("[PURGE, DELETE]", "PURGE, DELETE")
    r = harness.check_config(files={"ip_allow.yaml": yaml_bad})
    expect_eq(r.rc, 1, "cistern -t exit status (stderr:\n%s)" % r.stderr)
    expect_in("ip_allow.yaml:5: methods: \"PURGE, DELETE\" is not a method name",
              r.stderr, "cistern -t")
    r = harness.check_config(ip_allow="src_ip=127.0.0.2 action=ip_deny method=PURGE,DELETE\n"
                                      "src_ip=0/0 action=ip_allow\n")
    expect_eq(r.rc, 1, "cistern -t exit status (stderr:\n%s)" % r.stderr)
    expect_in("ip_allow.config:1: method=: \"PURGE,DELETE\" is not a method name",
              r.stderr, "cistern -t")
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1,
                     files={"ip_allow.yaml": DENY_PURGE_YAML}) as c:
            c.expect_log(r"reload failed|is not a method name")
            expect_eq(req(c, "PURGE", "/p", src="127.0.0.2").status, 403, "before")
            c.write_file("ip_allow.yaml", yaml_bad)
            c.reload(wait_log=r"reload (ok|failed)", timeout=15)
            expect_in("ip_allow.yaml:5: methods: \"PURGE, DELETE\" is not a method name",
                      c.error_log(), "error log")
            expect_eq(req(c, "PURGE", "/p", src="127.0.0.2").status, 403, "after the reload")
            expect_eq(req(c, "DELETE", "/p", src="127.0.0.2").status, 403, "after the reload")
            expect_eq(origin_targets(o), [], "origin saw")


def test_null_methods_is_an_error():
    """`methods: ~` (or null, Null, NULL) is YAML's null, which ATS refuses
    as neither a method nor a list; Cistern read it as a method named "~"
    that no request carries, so the deny rule denied nothing.  An error
    with file:line; a quoted "~" is still a name."""
    for null in ("~", "null", "NULL", "[PURGE, ~]"):
        text = DENY_PURGE_YAML.replace("[PURGE, DELETE]", null)
        r = harness.check_config(files={"ip_allow.yaml": text})
        expect_eq(r.rc, 1, "methods: %s (stderr:\n%s)" % (null, r.stderr))
        expect_in("ip_allow.yaml:5: methods: a YAML null is no method",
                  r.stderr, "cistern -t, methods: %s" % null)
    text = DENY_PURGE_YAML.replace("[PURGE, DELETE]", "'~'")
    r = harness.check_config(files={"ip_allow.yaml": text})
    expect_eq(r.rc, 0, "methods: '~' (stderr:\n%s)" % r.stderr)


def test_rule_behind_an_earlier_one_is_an_error():
    """The first rule holding an address decides (ATS), so a rule whose
    addresses earlier rules all hold never applies.  Debian's stock file
    says to append rules after its own, whose 0/0 and ::/0 rules hold every
    address: an appended deny was silently dead in ATS and in Cistern, and
    127.0.0.2 could still GET.  A dead rule that would deny something is an
    error with file:line naming the earlier rule; a dead allow-everything
    rule is a warning; a reload to such a file keeps the running rules."""
    appended = DEBIAN_IP_ALLOW_YAML + (
        "  - apply: in\n"
        "    ip_addrs: [127.0.0.2, 10.0.0.0/8]\n"
        "    action: deny\n")
    r = harness.check_config(files={"ip_allow.yaml": appended})
    expect_eq(r.rc, 1, "cistern -t on an appended deny (stderr:\n%s)" % r.stderr)
    expect_in("ip_allow.yaml:53: 127.0.0.2: this rule never applies: earlier rules "
              "hold all of it (line 37 first)", r.stderr, "cistern -t")
    expect_in("ip_allow.yaml:53: 10.0.0.0-10.255.255.255: this rule never applies",
              r.stderr, "cistern -t")
    # covered by two earlier ranges together, in ip_allow.config
    r = harness.check_config(ip_allow="src_ip=10.0.0.0-10.0.0.127 action=ip_allow\n"
                                      "src_ip=10.0.0.128/25 action=ip_allow\n"
                                      "src_ip=10.0.0.0/24 action=ip_deny method=PURGE\n"
                                      "src_ip=10.0.0.0/23 action=ip_deny method=PURGE\n")
    expect_eq(r.rc, 1, "cistern -t on a union (stderr:\n%s)" % r.stderr)
    expect_in("ip_allow.config:3: 10.0.0.0-10.0.0.255: this rule never applies: "
              "earlier rules hold all of it (line 1 first)", r.stderr, "cistern -t")
    expect("ip_allow.config:4" not in r.stderr, "10.0.1.0/24 is new:\n" + r.stderr)
    # two rules on one line (flow style); one rule's own ranges overlapping
    # say the same thing twice, which is no error
    r = harness.check_config(files={"ip_allow.yaml":
        "ip_allow: [{apply: in, ip_addrs: [0/0, 10.0.0.0/8], action: allow},"
        " {apply: in, ip_addrs: 10.0.0.0/8, action: deny}]\n"})
    expect_eq(r.rc, 1, "cistern -t, one line (stderr:\n%s)" % r.stderr)
    expect_in("ip_allow.yaml:1: 10.0.0.0-10.255.255.255: this rule never applies",
              r.stderr, "cistern -t")
    expect("warning" not in r.stderr, "the first rule's own ranges:\n" + r.stderr)
    # a dead allow-all rule restricts nothing: a warning
    r = harness.check_config(files={"ip_allow.yaml": DENY_GET_YAML + (
        "  - {apply: in, ip_addrs: 127.0.0.1, action: allow}\n")})
    expect_eq(r.rc, 0, "cistern -t on a dead allow (stderr:\n%s)" % r.stderr)
    expect_in("warning: ", r.stderr, "cistern -t")
    expect_in("ip_allow.yaml:9: 127.0.0.1: this rule never applies", r.stderr,
              "cistern -t")
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1,
                     files={"ip_allow.yaml": DENY_GET_YAML}) as c:
            c.expect_log(r"reload failed|never applies")
            c.write_file("ip_allow.yaml", appended)
            c.reload(wait_log=r"reload (ok|failed)", timeout=15)
            expect_in("this rule never applies", c.error_log(), "error log")
            expect_eq(req(c, "GET", "/g", src="127.0.0.2").status, 403, "kept rules")
            expect_eq(origin_targets(o), [], "origin saw")


def test_both_files_is_an_error():
    """ip_allow.yaml and ip_allow.config together: an error naming both."""
    r = harness.check_config(ip_allow="src_ip=0/0 action=ip_allow\n",
                             files={"ip_allow.yaml": ALLOW_ALL_YAML})
    expect_eq(r.rc, 1, "cistern -t exit status")
    expect_in("conf/ip_allow.yaml: both ", r.stderr, "cistern -t")
    expect_in("/conf/ip_allow.yaml and ", r.stderr, "cistern -t")
    expect_in("/conf/ip_allow.config exist", r.stderr, "cistern -t")


def test_apply_out_denies_the_origin():
    """apply: out denying the origin's address: the client gets 403, the
    origin sees nothing, nothing is cached (a second GET is 403 again and
    still reaches nobody).  An origin on another address stays reachable."""
    with Origin() as o, Origin(host="127.0.0.3") as o3:
        yaml = ALLOW_ALL_YAML + ("  - apply: out\n"
                                 "    ip_addrs: 127.0.0.1\n"
                                 "    action: deny\n")
        remap = remap_for(o) + remap_for(o3, "b.test")
        with Cistern(remap=remap, workers=1, files={"ip_allow.yaml": yaml}) as c:
            for i in range(2):
                r = req(c, "GET", "/bytes/10/headers?Cache-Control=max-age%3D60")
                expect_eq(r.status, 403, "GET %d to a denied origin" % i)
            expect_eq(req(c, "GET", "/x", host="b.test").status, 200, "other origin")
            expect_eq(o.requests(), [], "the denied origin saw")
            expect_eq([t for _, t in origin_targets(o3)], ["/x"], "the allowed origin saw")
            expect_in("to origin 127.0.0.1", c.error_log(), "error log")
            expect_in("denied by ip_allow.yaml", c.error_log(), "error log")


def test_apply_out_methods_on_a_pooled_connection():
    """An out rule with methods is checked per request, also when the
    request would reuse a pooled connection to an allowed origin: GET goes
    through, DELETE is 403 and never sent, the next GET goes through."""
    yaml = ALLOW_ALL_YAML + ("  - apply: out\n"
                             "    ip_addrs: 127.0.0.0/8\n"
                             "    action: deny\n"
                             "    methods: [DELETE, PUT]\n")
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1, files={"ip_allow.yaml": yaml}) as c:
            k = Conn(c.port)
            for m, path, want in (("GET", "/1", 200), ("DELETE", "/2", 403),
                                  ("GET", "/3", 200)):
                k.send(("%s %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (m, path, HOST)).encode())
                expect_eq(k.responses(1, methods=[m])[0].status, want, "%s %s" % (m, path))
            expect_eq(origin_targets(o), [("GET", "/1"), ("GET", "/3")], "origin saw")
            expect_eq(len(o.conns()), 1, "origin connections (the GETs shared one)")


def test_out_rule_on_a_resolved_name():
    """An origin given by name is checked on the address it resolves to."""
    yaml = ALLOW_ALL_YAML + ("  - apply: out\n"
                             "    ip_addrs: [127.0.0.0/8, \"::1\"]\n"
                             "    action: deny\n")
    with Origin() as o:
        remap = ["map http://%s/ http://localhost:%d/" % (HOST, o.port)]
        with Cistern(remap=remap, workers=1, files={"ip_allow.yaml": yaml}) as c:
            expect_eq(req(c, "GET", "/n").status, 403, "GET to localhost")
            expect_eq(o.requests(), [], "origin saw")


def test_dest_ip_in_ip_allow_config():
    """dest_ip= lines of ip_allow.config are out rules (they used to be
    refused): the denied origin sees nothing and the client gets 403."""
    with Origin() as o, Origin(host="127.0.0.3") as o3:
        rules = ("src_ip=0/0 action=ip_allow\n"
                 "dest_ip=127.0.0.1 action=ip_deny\n"
                 "dest_ip=127.0.0.3 action=ip_deny method=POST\n")
        remap = remap_for(o) + remap_for(o3, "b.test")
        with Cistern(remap=remap, workers=1, ip_allow=rules) as c:
            expect_eq(req(c, "GET", "/a").status, 403, "GET to 127.0.0.1")
            expect_eq(req(c, "GET", "/b", host="b.test").status, 200, "GET to 127.0.0.3")
            expect_eq(req(c, "POST", "/c", host="b.test", body=b"z").status, 403,
                      "POST to 127.0.0.3")
            expect_eq(o.requests(), [], "127.0.0.1 saw")
            expect_eq(origin_targets(o3), [("GET", "/b")], "127.0.0.3 saw")
            expect_in("denied by ip_allow.config", c.error_log(), "error log")


def test_reload_switches_ip_allow_yaml():
    """A reload reads a changed ip_allow.yaml; a reload to a broken one, or
    to one beside an ip_allow.config, fails and the running rules stay."""
    with Origin() as o:
        with Cistern(remap=remap_for(o), workers=1,
                     files={"ip_allow.yaml": ALLOW_ALL_YAML}) as c:
            c.expect_log(r"reload failed|unknown key \"bogus\"|ip_allow.config exist")
            expect_eq(req(c, "GET", "/1", src="127.0.0.2").status, 200, "before")
            c.write_file("ip_allow.yaml", DENY_GET_YAML)
            c.reload(wait_log=r"reload ok", timeout=15)
            expect_eq(req(c, "GET", "/2", src="127.0.0.2").status, 403, "after reload")
            expect_eq(req(c, "GET", "/3").status, 200, "after reload, from .1")
            c.write_file("ip_allow.yaml", "ip_allow:\n  - apply: in\n    bogus: 1\n")
            c.reload(wait_log=r"reload failed", timeout=15)
            expect_eq(req(c, "GET", "/4", src="127.0.0.2").status, 403, "kept rules")
            c.write_file("ip_allow.yaml", ALLOW_ALL_YAML)
            c.write_file("ip_allow.config", "src_ip=0/0 action=ip_allow\n")
            c.reload(wait_log=r"reload failed", timeout=15)
            expect_eq(req(c, "GET", "/5", src="127.0.0.2").status, 403, "kept rules (both)")
            expect_eq([t for _, t in origin_targets(o)], ["/1", "/3"], "origin saw")


if __name__ == "__main__":
    harness.main()
