#!/usr/bin/env python3
"""The chaos client (issue 16) against a live daemon: t/chaos.py drives
random hostile traffic (slow, half-closing, resetting and silent clients;
origins that trickle, hang, close, reset, send malformed heads, more than
they announce or endless empty lines; pipelining, bodies, bad chunked,
smuggling attempts, PUSH, PURGE, /_stats, malformed bytes) at 8
concurrent clients and checks its invariants; the harness's teardown adds
no sanitizer report and no unexpected error-log line.

Duration: CISTERN_CHAOS_SECONDS, else 60 s for a sanitizer build and 20 s
for a plain one.  Seed: CISTERN_CHAOS_SEED, else random (printed; the
failure message names it).
"""

import os

import harness
from harness import Cistern, Origin, expect

import chaos

RECORDS = {
    "proxy.config.http.push_method_enabled": 1,
    # Faults must resolve well inside the driver's 25 s limits.
    "proxy.config.http.transaction_no_activity_timeout_out": 3,
    "proxy.config.http.transaction_no_activity_timeout_in": 5,
    "proxy.config.http.connect_attempts_timeout": 3,
    "proxy.config.http.keep_alive_no_activity_timeout_in": 5,
    "proxy.config.http.keep_alive_no_activity_timeout_out": 5,
    "proxy.config.cistern.request_header_timeout": 3,
    "proxy.config.http.per_server.connection.max_idle": 8,
}


def seconds():
    s = os.environ.get("CISTERN_CHAOS_SECONDS")
    if s:
        return float(s)
    return 60.0 if harness.sanitizer_build() else 20.0


@harness.timeout(int(seconds()) + 240)
def test_chaos():
    seed = os.environ.get("CISTERN_CHAOS_SEED")
    env = {}
    if harness.sanitizer_build():
        # A small quarantine, so that RssAnon measures the daemon and not
        # ASan's 256 MB of freed memory held back.
        env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "")
                               + ":quarantine_size_mb=16")
    with Origin() as o, Cistern(
            storage=["cache 64M"], records=RECORDS, workers=2, env=env,
            remap=["map http://c.test/ http://%s/" % o.authority]) as c:
        # Origin faults and hostile clients are [warn] and [info] lines:
        # no [error] line is expected at all.
        lines = []

        def log(s):
            lines.append(s)
            print(s, flush=True)
        rep = chaos.run(c.port, host="c.test", seconds=seconds(),
                        seed=int(seed) if seed else None, concurrency=8,
                        master_pid=c.pid, mode="chaos", log=log,
                        fd_slack=12)
        expect(not rep["violations"],
               "%d invariant violation(s); repeat with "
               "CISTERN_CHAOS_SEED=%d:\n%s" % (
                   len(rep["violations"]), rep["seed"],
                   "\n".join(x for x in lines if x.startswith("VIOLATION"))
                   [:20000]))
        expect(rep["bodies_checked"] > 100, "only %d bodies checked"
               % rep["bodies_checked"])


if __name__ == "__main__":
    harness.main()
