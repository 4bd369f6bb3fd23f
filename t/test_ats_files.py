#!/usr/bin/env python3
"""t/test_ats_files.py: an ATS operator's directory, taken as it is (issue 18).

Debian 12's stock /etc/trafficserver (from the `trafficserver` package, or a
`dpkg-deb -x` of it named by CISTERN_ATS_ETC) passes `cistern -t` with the
migration report listing what was understood, matched and ignored, and
Cistern serves with it.  records.config keys Cistern does not implement:
a "matches" key with another value is an error with file:line, ATS-internal
keys give one warning per file, unknown keys one warning each.  The other
ATS files fail closed: a non-empty strategies.yaml (and plugin.config,
hosting.config, volume.config, splitdns.config, sni.yaml; parent.config is
read)
is an error, socks.config passes while socks_needed is 0, logging.yaml is
read (errors with file:line; test_logformat.py has the rest).  README.md's
key list is what `cistern --list-keys` prints.

Run one test: python3 -B t/test_ats_files.py test_name
"""

import os
import re
import shutil
import subprocess
import tempfile
import urllib.parse

import harness
from harness import (Cistern, Origin, check_config, curl, expect, expect_eq,
                     expect_in, run_cistern)

BASE = [
    "CONFIG proxy.config.http.server_ports STRING 0",
    "CONFIG proxy.config.cistern.run_dir STRING run",
    "CONFIG proxy.config.log.logfile_dir STRING log",
    "CONFIG proxy.config.admin.user_id STRING #-1",
]
INTERNAL_WARNING = re.compile(r"only tunes? ATS internals")


def stock_dir():
    """Debian 12's stock ATS config directory, or skip."""
    env = os.environ.get("CISTERN_ATS_ETC")
    cands = []
    if env:
        cands += [os.path.join(env, "etc", "trafficserver"), env]
    cands.append("/etc/trafficserver")
    for d in cands:
        if os.path.isfile(os.path.join(d, "records.config")):
            return d
    raise harness.SkipTest("no ATS config directory (apt-get install "
                           "trafficserver, or CISTERN_ATS_ETC=DIR)")


def read_tree(top):
    """{relative path: bytes} of every file under top."""
    out = {}
    for root, _dirs, files in os.walk(top):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, top)] = fh.read()
    return out


def rewrite_storage(text, scratch):
    """Point every span of storage.config at scratch (sizes kept)."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            parts = s.split()
            parts[0] = scratch
            line = " ".join(parts)
        out.append(line)
    return "\n".join(out) + "\n"


def set_record(text, name, value, typ="STRING"):
    """Replace the CONFIG line of name (appending it when absent)."""
    pat = re.compile(r"^(CONFIG|LOCAL)\s+%s\s+\S+.*$" % re.escape(name), re.M)
    line = "CONFIG %s %s %s" % (name, typ, value)
    if pat.search(text):
        return pat.sub(line, text)
    return text + line + "\n"




def report_sections(stdout):
    """The migration report as {kind: [lines]} plus {"refused": text}."""
    secs, cur = {}, None
    for line in stdout.splitlines():
        m = re.match(r"^  (understood|matches|ignored|unknown)\b.*: (\d+)$",
                     line)
        if m:
            cur = m.group(1)
            secs[cur] = []
            secs[cur + "_n"] = int(m.group(2))
            continue
        m = re.match(r"^  refused: (.*)$", line)
        if m:
            secs["refused"] = m.group(1)
            cur = None
            continue
        if cur and line.startswith("    "):
            secs[cur].append(line.strip())
    return secs


def stock_copy(tmp):
    src = stock_dir()
    conf = os.path.join(tmp, "conf")
    shutil.copytree(src, conf, symlinks=True)
    scratch = os.path.join(tmp, "cache")
    os.makedirs(scratch)
    p = os.path.join(conf, "storage.config")
    with open(p) as f:
        text = f.read()
    with open(p, "w") as f:
        f.write(rewrite_storage(text, scratch))
    return conf


def check_stock(conf):
    """cistern -t on the stock directory, verbatim (its server_ports is
    ATS's "8080 8080:ipv6", IPv4 and IPv6 on one port)."""
    return run_cistern(["-t", "-c", conf])


def test_debian_stock_config_checks():
    tmp = tempfile.mkdtemp(prefix="cistern-t-")
    try:
        conf = stock_copy(tmp)
        r = check_stock(conf)
        expect_eq(r.rc, 0, "cistern -t on the stock directory (stderr:\n%s)"
                  % r.stderr)
        expect_in("configuration %s is ok" % os.path.realpath(conf),
                  r.stdout, "stdout")
        expect(not re.search(r"(?m)^(?!warning: )\S+:\d+: ", r.stderr),
               "errors printed:\n" + r.stderr)
        internal = [ln for ln in r.stderr.splitlines()
                    if INTERNAL_WARNING.search(ln)]
        expect_eq(len(internal), 1, "ATS-internal warnings (one per file): %r"
                  % internal)
        expect(internal[0].startswith("warning: %s/records.config: "
                                      % os.path.realpath(conf)),
               "internal warning names the file: " + internal[0])
        s = report_sections(r.stdout)
        for kind in ("understood", "matches", "ignored", "unknown"):
            expect(kind in s, "report has no %s list:\n%s" % (kind, r.stdout))
        expect_eq(s["refused"], "0 errors", "refused line")
        # every key of the stock file is known: implemented, matched or
        # ignored with a reason, none merely "unknown"
        expect_eq(s["unknown"], [], "unknown keys in the stock file")
        joined = {k: "\n".join(v) for k, v in s.items()
                  if isinstance(v, list)}
        for needle in ("proxy.config.http.server_ports",
                       "proxy.config.http.keep_alive_no_activity_timeout_in 120",
                       "proxy.config.url_remap.remap_required 1",
                       "proxy.config.http.cache.heuristic_lm_factor 0.10"):
            expect_in(needle, joined["understood"], "understood")
        for needle in ("proxy.config.reverse_proxy.enabled 1",
                       "proxy.config.http.cache.cache_urls_that_look_dynamic 1",
                       "socks.config:", "parent.config: empty",
                       "plugin.config: empty"):
            expect_in(needle, joined["matches"], "matches")
        for needle in ("proxy.config.exec_thread.limit: ATS's event threads",
                       "proxy.config.cache.threads_per_disk:",
                       "proxy.config.cache.ram_cache.size:",
                       "proxy.config.log.rolling_enabled:",
                       "proxy.config.diags.debug.tags:", "body_factory:"):
            expect_in(needle, joined["ignored"], "ignored")
        # every line of the report is relative to the directory and has
        # file:line (records.config keys) or file: (whole files)
        for kind in ("understood", "matches", "ignored", "unknown"):
            for ln in s[kind]:
                expect(re.match(r"^[\w./-]+(:\d+)?: ", ln),
                       "report line without file: %r" % ln)
            expect_eq(len(s[kind]), s[kind + "_n"], "%s count" % kind)
    finally:
        if not os.environ.get("CISTERN_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


@harness.timeout(180)
def test_debian_stock_config_serves():
    src = stock_dir()
    files = read_tree(src)
    records = files.pop("records.config").decode()
    # as the harness does for every instance: a free port, private run and
    # log directories, no privilege drop
    for name, value in (("proxy.config.http.server_ports", "0"),
                        ("proxy.config.cistern.run_dir", "run"),
                        ("proxy.config.log.logfile_dir", "log"),
                        ("proxy.config.admin.user_id", "#-1")):
        records = set_record(records, name, value)
    remap = files.pop("remap.config").decode()
    storage = rewrite_storage(files.pop("storage.config").decode(), "cache")
    with Origin() as o:
        remap += "map http://stock.test/ http://%s/\n" % o.authority
        with Cistern(records_text=records, remap=remap, storage=storage,
                     files=files) as c:
            q = urllib.parse.urlencode({"Cache-Control": "max-age=60"})
            url = c.url("/bytes/1000/headers?" + q)
            r1 = curl([url, "-H", "Host: stock.test"])
            expect_eq(r1.status, 200, "first request")
            expect_eq(r1.body, harness.pattern(1000), "body")
            r2 = curl([url, "-H", "Host: stock.test"])
            expect_eq(r2.status, 200, "second request")
            expect_eq(r2.header("X-Origin-Seq"), r1.header("X-Origin-Seq"),
                      "second request a cache hit (same X-Origin-Seq)")
            expect_eq(len(o.requests()), 1, "requests at the origin")
            r3 = curl([c.url("/x"), "-H", "Host: other.test"])
            expect_eq(r3.status, 404, "unmapped host")


def _check(lines, files=None):
    return check_config(records_text=BASE + lines, files=files or {})


def test_matches_key_other_value_is_error():
    r = _check(["CONFIG proxy.config.reverse_proxy.enabled INT 1",
                "CONFIG proxy.config.http.cache.cache_urls_that_look_dynamic INT 0",
                "CONFIG proxy.config.http.cache.post_method INT 1"])
    expect_eq(r.rc, 1, "exit status (stderr:\n%s)" % r.stderr)
    expect(re.search(r"records\.config:6: proxy\.config\.http\.cache\."
                     r"cache_urls_that_look_dynamic 0 is not supported "
                     r"\(only 1\): URLs with a query", r.stderr),
           "no file:line error for cache_urls_that_look_dynamic 0:\n"
           + r.stderr)
    expect(re.search(r"records\.config:7: proxy\.config\.http\.cache\."
                     r"post_method 1 is not supported \(only 0\)",
                     r.stderr),
           "no file:line error for post_method 1:\n" + r.stderr)
    expect("reverse_proxy" not in r.stderr, "the matching value refused:\n"
           + r.stderr)
    s = report_sections(r.stdout)
    expect_eq(s.get("refused"), "2 errors (listed above)", "refused line")
    expect_in("proxy.config.reverse_proxy.enabled 1", "\n".join(s["matches"]),
              "matches list")
    # the same key with the matching value passes
    r = _check(["CONFIG proxy.config.http.cache.cache_urls_that_look_dynamic INT 1",
                "CONFIG proxy.config.http.cache.post_method INT 0"])
    expect_eq(r.rc, 0, "matching values (stderr:\n%s)" % r.stderr)


def test_ats_access_keys_are_matches():
    """ATS keys that restrict access, which Cistern does not implement,
    were unknown keys: one warning, and (certification_level 2) every TLS
    client served without a certificate, the Cookie sent on, no HSTS.
    Each is now a "matches" key: an error with file:line for a value that
    asks for the restriction, accepted with ATS's default."""
    asks = ["CONFIG proxy.config.ssl.client.certification_level INT 2",
            "CONFIG proxy.config.ssl.hsts_max_age INT 31536000",
            "CONFIG proxy.config.http.anonymize_remove_cookie INT 1",
            "CONFIG proxy.config.http.referer_filter INT 1",
            "CONFIG proxy.config.ssl.client.TLSv1_2 INT 0",
            "CONFIG proxy.config.http.strict_uri_parsing INT 1"]
    r = _check(asks)
    expect_eq(r.rc, 1, "exit status (stderr:\n%s)" % r.stderr)
    for i, line in enumerate(asks):
        key, value = line.split()[1], line.split()[3]
        expect(re.search(r"records\.config:%d: %s %s is not supported"
                         % (5 + i, re.escape(key), value), r.stderr),
               "no file:line error for %s %s:\n%s" % (key, value, r.stderr))
    expect("unknown key" not in r.stderr, "an unknown-key warning:\n" + r.stderr)
    r = _check(["CONFIG proxy.config.ssl.client.certification_level INT 0",
                "CONFIG proxy.config.ssl.hsts_max_age INT -1",
                "CONFIG proxy.config.http.anonymize_remove_cookie INT 0",
                "CONFIG proxy.config.http.referer_filter INT 0",
                "CONFIG proxy.config.ssl.client.TLSv1_2 INT 1",
                "CONFIG proxy.config.http.strict_uri_parsing INT 2",
                "CONFIG proxy.config.ssl.client.cipher_suite STRING NULL"])
    expect_eq(r.rc, 0, "ATS's defaults (stderr:\n%s)" % r.stderr)
    expect_eq(report_sections(r.stdout)["unknown_n"], 0, "unknown keys")


def test_local_bind_addresses_are_matches():
    """ATS's LOCAL proxy.local.incoming_ip_to_bind binds the listeners to
    one address (loopback only, say); it was an unknown key, a warning,
    and Cistern listened on every address.  It and outgoing_ip_to_bind are
    errors with file:line unless NULL, the incoming one naming ip-in=."""
    r = _check(["LOCAL proxy.local.incoming_ip_to_bind STRING 127.0.0.1",
                "LOCAL proxy.local.outgoing_ip_to_bind STRING 192.0.2.1"])
    expect_eq(r.rc, 1, "exit status (stderr:\n%s)" % r.stderr)
    expect(re.search(r"records\.config:5: proxy\.local\.incoming_ip_to_bind "
                     r"127\.0\.0\.1 is not supported \(only NULL\): .*ip-in=",
                     r.stderr), r.stderr)
    expect_in("records.config:6: proxy.local.outgoing_ip_to_bind 192.0.2.1 is "
              "not supported", r.stderr, "cistern -t")
    r = _check(["LOCAL proxy.local.incoming_ip_to_bind STRING NULL"])
    expect_eq(r.rc, 0, "NULL (stderr:\n%s)" % r.stderr)


def test_admin_allow_error_has_its_line():
    """A bad address in proxy.config.cistern.admin.allow (who may read the
    stats) was reported as "records.config: ..." without its line, found
    only after the whole file was read; it is checked where it is set, as
    proxy_protocol_allowlist is.  "none" lets nobody read them."""
    r = _check(["CONFIG proxy.config.cistern.admin.allow STRING 10.0.0.0/8, bogus"])
    expect_eq(r.rc, 1, "exit status (stderr:\n%s)" % r.stderr)
    expect_in("records.config:5: proxy.config.cistern.admin.allow: bad address "
              "in \"10.0.0.0/8, bogus\"", r.stderr, "cistern -t")
    r = _check(["CONFIG proxy.config.cistern.admin.allow STRING none"])
    expect_eq(r.rc, 0, "admin.allow none (stderr:\n%s)" % r.stderr)
    with Cistern(records={"proxy.config.cistern.admin.allow": "none"}) as c:
        expect_eq(curl([c.url("/_stats")]).status, 403, "/_stats from loopback")


def test_internal_keys_one_warning_per_file():
    r = _check(["CONFIG proxy.config.exec_thread.limit INT 8",
                "CONFIG proxy.config.accept_threads INT 4",
                "CONFIG proxy.config.cache.ram_cache.size INT 1G",
                "CONFIG proxy.config.log.rolling_interval_sec INT 3600",
                "CONFIG proxy.config.no_such.key INT 1",
                "CONFIG proxy.config.also_unknown STRING x"])
    expect_eq(r.rc, 0, "exit status (stderr:\n%s)" % r.stderr)
    warns = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    internal = [ln for ln in warns if INTERNAL_WARNING.search(ln)]
    expect_eq(len(internal), 1, "internal warnings: %r" % warns)
    for k in ("exec_thread.limit", "accept_threads", "ram_cache.size",
              "rolling_interval_sec"):
        expect_in(k, internal[0], "internal warning")
    expect_in("4 keys only tune ATS internals", internal[0], "warning text")
    unknown = [ln for ln in warns if "unknown key" in ln]
    expect_eq(len(unknown), 2, "unknown-key warnings: %r" % warns)
    expect(re.search(r"records\.config:9: unknown key "
                     r"\"proxy\.config\.no_such\.key\"", unknown[0]),
           "unknown key warning has file:line: %r" % unknown[0])
    s = report_sections(r.stdout)
    expect_eq(s["ignored_n"], 4, "ignored count")
    expect_eq(s["unknown_n"], 2, "unknown count")
    expect(any("proxy.config.accept_threads: ATS's accept threads" in ln
               for ln in s["ignored"]), "reason in report: %r" % s["ignored"])


def test_parent_config_read_strategies_fail_closed():
    r = _check([], files={"parent.config":
                          "# routing\n\ndest_domain=. parent=\"p1\"\n"})
    expect_eq(r.rc, 1, "exit status (stderr:\n%s)" % r.stderr)
    expect(re.search(r"parent\.config:3: parent=: \"p1\": a parent needs "
                     r"host:port", r.stderr),
           "no parent.config:3 error:\n" + r.stderr)
    r = _check([], files={"parent.config":
                          "# routing\n\ndest_domain=. parent=\"p1:8080\"\n"})
    expect_eq(r.rc, 0, "a parent line is read (stderr:\n%s)" % r.stderr)
    s = report_sections(r.stdout)
    expect_in("parent.config:3: parent.config rule (1 parent)",
              "\n".join(s["understood"]), "understood")
    r = _check([], files={"parent.config": "# only comments\n\n  # indented\n",
                          "strategies.yaml": "# c\n---\nstrategies: []\n"})
    expect_eq(r.rc, 0, "comments only (stderr:\n%s)" % r.stderr)
    s = report_sections(r.stdout)
    expect_in("parent.config: empty", "\n".join(s["matches"]), "matches")
    expect_in("strategies.yaml: empty", "\n".join(s["matches"]), "matches")
    r = _check([], files={"strategies.yaml":
                          "strategies:\n  - strategy: s1\n    policy: rr_ip\n"})
    expect_eq(r.rc, 1, "strategies.yaml with a strategy")
    expect(re.search(r"strategies\.yaml:2: .*strategies\.yaml is not "
                     r"supported yet", r.stderr), r.stderr)


def test_other_ats_files_fail_closed():
    cases = {
        "plugin.config": ("stats_over_http.so\n", "plugin stats_over_http.so: cannot load"),
        "hosting.config": ("hostname=a.test volume=1\n",
                           "cache partitions per host"),
        "volume.config": ("volume=1 scheme=http size=50%\n",
                          "cache volumes are not supported"),
        "splitdns.config": ("dest_domain=a.test named=10.0.0.1\n",
                            "split DNS is not supported"),
        "sni.yaml": ("sni:\n  - fqdn: a.test\n    verify_client: STRICT\n",
                     "per-name TLS policy"),
    }
    for name, (text, why) in cases.items():
        r = _check([], files={name: "# c\n" + text})
        expect_eq(r.rc, 1, "%s not empty: exit status" % name)
        expect(re.search(r"%s:\d+: .*%s" % (re.escape(name), re.escape(why)),
                         r.stderr), "%s: no error:\n%s" % (name, r.stderr))
    # logging.yaml is read (conf/logging.c): a log without its format is
    # an error with file:line, an unknown field too
    r = _check([], files={"logging.yaml":
                          "logging:\n  logs:\n    - filename: squid\n"})
    expect_eq(r.rc, 1, "logging.yaml log without a format: exit status")
    expect(re.search(r"logging\.yaml:3: a log needs a filename and a format",
                     r.stderr), "logging.yaml error:\n" + r.stderr)
    r = _check([], files={"logging.yaml":
                          "logging:\n  formats:\n    - name: x\n"
                          "      format: '%<chi> %<nosuch>'\n"})
    expect_eq(r.rc, 1, "logging.yaml unknown field: exit status")
    expect(re.search(r"logging\.yaml:4: format \"x\": unknown log field at "
                     r"\"%<nosuch>\"", r.stderr),
           "logging.yaml error:\n" + r.stderr)


def test_records_yaml_and_older_sni_files_fail_closed():
    """ATS 10's records.yaml, and ATS 8's ssl_server_name.yaml (sni.yaml's
    old name: client certificates, ip_allow per name), were not looked at:
    a records.yaml asking for client certificates was silently not
    applied.  With content they are errors at their first line; empty,
    they match."""
    r = _check([], files={"records.yaml":
                          "# ATS 10\nrecords:\n  ssl:\n    client:\n"
                          "      certification_level: 2\n"})
    expect_eq(r.rc, 1, "records.yaml with keys (stderr:\n%s)" % r.stderr)
    expect(re.search(r"records\.yaml:5: .*records\.yaml \(ATS 10\) is not "
                     r"read", r.stderr), r.stderr)
    r = _check([], files={"ssl_server_name.yaml":
                          "- fqdn: '*.test'\n  verify_client: STRICT\n"})
    expect_eq(r.rc, 1, "ssl_server_name.yaml with a rule")
    expect(re.search(r"ssl_server_name\.yaml:1: .*per-name TLS policy", r.stderr),
           r.stderr)
    r = _check([], files={"records.yaml": "# nothing\n---\nrecords: {}\n",
                          "ssl_server_name.yaml": "# c\n"})
    expect_eq(r.rc, 0, "empty files (stderr:\n%s)" % r.stderr)
    m = "\n".join(report_sections(r.stdout)["matches"])
    expect_in("records.yaml: empty", m, "matches")
    expect_in("ssl_server_name.yaml: empty", m, "matches")


def test_socks_config_with_socks_needed_0_passes():
    socks = "# c\nno_socks 123.14.15.1 - 123.14.17.4, 113.14.18.2\n"
    r = _check(["CONFIG proxy.config.socks.socks_needed INT 0"],
               files={"socks.config": socks})
    expect_eq(r.rc, 0, "exit status (stderr:\n%s)" % r.stderr)
    s = report_sections(r.stdout)
    m = "\n".join(s["matches"])
    expect_in("proxy.config.socks.socks_needed 0", m, "matches")
    expect_in("socks.config:2: 1 line not used while "
              "proxy.config.socks.socks_needed is 0", m, "matches")
    r = _check([], files={"socks.config": socks})
    expect_eq(r.rc, 0, "socks_needed unset (ATS default 0)")
    r = _check(["CONFIG proxy.config.socks.socks_needed INT 1"],
               files={"socks.config": socks})
    expect_eq(r.rc, 1, "socks_needed 1")
    expect(re.search(r"records\.config:5: proxy\.config\.socks\.socks_needed 1 "
                     r"is not supported", r.stderr), r.stderr)
    expect(re.search(r"socks\.config:2: SOCKS is not supported", r.stderr),
           r.stderr)


def test_list_keys_and_readme_in_sync():
    r = run_cistern(["--list-keys"])
    expect_eq(r.rc, 0, "--list-keys exit status")
    for head in ("Implemented (", "Matches (", "ATS-internal ("):
        expect_in(head, r.stdout, "--list-keys")
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| `")]
    for ln in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]]
        expect(all(cells), "an empty cell (a row without meaning?): %r" % ln)
    expect_in("| `proxy.config.http.server_ports` | STRING |", r.stdout,
              "implemented row")
    expect_in("| `proxy.config.log.logfile_dir` | STRING | "
              "`$(localstatedir)/log/cistern` |", r.stdout,
              "build-independent default")
    h = run_cistern(["--help"])
    expect_in("--list-keys", h.stdout, "--help")
    script = os.path.join(harness.srcdir(), "scripts", "readme-keys.sh")
    p = subprocess.run(["bash", script, "--check", harness.cistern_bin()],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    expect_eq(p.returncode, 0, "scripts/readme-keys.sh --check (README.md "
              "differs from the code; run scripts/readme-keys.sh):\n%s%s"
              % (p.stdout[-3000:], p.stderr))


if __name__ == "__main__":
    harness.main()
