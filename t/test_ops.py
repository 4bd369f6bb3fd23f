#!/usr/bin/env python3
"""End-to-end tests of the operations kit (issue 9): the LSB init script,
the systemd unit, the logrotate snippet and the privilege drop.

The init script runs directly (sh), with CISTERN_BIN, CISTERN_CONF and a
private config directory, against the real daemon: it detaches, so these
tests track the master through its pid file and check by /proc that
nothing is left after a stop.  The privilege-drop tests need root (CI runs
as root); as another user they are skipped.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time

import harness
from harness import Cistern, Origin, curl, expect, expect_eq

SRCDIR = os.environ.get("CISTERN_SRCDIR",
                        os.path.dirname(os.path.dirname(
                            os.path.abspath(__file__))))


def init_script():
    """The generated script next to the binary when built, else the source
    (its @...@ defaults are overridden by the environment anyway)."""
    built = os.path.join(os.path.dirname(harness.cistern_bin()), "scripts",
                         "init.d", "cistern")
    if os.path.exists(built):
        return built
    return os.path.join(SRCDIR, "scripts", "cistern.init")


class InitInstance:
    """A config directory driven through the init script."""

    def __init__(self, remap, records=None):
        self.tmpdir = tempfile.mkdtemp(prefix="cistern-init-")
        self.confdir = os.path.join(self.tmpdir, "conf")
        harness.write_confdir(self.confdir, records=records, remap=remap,
                              workers=2)
        self.run_dir = os.path.join(self.confdir, "run")
        self.log_dir = os.path.join(self.confdir, "log")
        self.failed = False
        self.pids = set()

    def run(self, action, timeout=60):
        env = dict(os.environ)
        env.update(CISTERN_BIN=harness.cistern_bin(),
                   CISTERN_CONF=self.confdir,
                   CISTERN_DEFAULTS="/nonexistent/cistern-defaults",
                   STOP_TIMEOUT="15")
        env = harness._sanitizer_env(env)
        p = subprocess.run(["sh", init_script(), action], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, cwd=self.tmpdir)
        r = harness.Result(p.returncode, p.stdout.decode("utf-8", "replace"),
                           p.stderr.decode("utf-8", "replace"))
        r.out = r.stdout + r.stderr
        return r

    def master_pid(self):
        try:
            with open(os.path.join(self.run_dir, "cistern.pid")) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def port(self):
        with open(os.path.join(self.run_dir, "ports")) as f:
            return int(f.read().split()[0])

    def track(self):
        """Remember the master and its children (checked after stop)."""
        pid = self.master_pid()
        if pid:
            self.pids.add(pid)
            self.pids.update(harness.descendants_of(pid))

    def alive(self):
        return sorted(p for p in self.pids if harness._alive(p))

    def error_log(self):
        return harness._read(os.path.join(self.log_dir, "error.log"))

    def cleanup(self):
        for p in self.alive():
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if self.failed or os.environ.get("CISTERN_KEEP"):
            return "(temp dir kept: %s)" % self.tmpdir
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        return ""


def get(port, host, path="/x"):
    return curl([("http://127.0.0.1:%d" % port) + path, "-H", "Host: " + host])


REMAP1 = ["redirect http://a.test/ http://b.test/"]
REMAP2 = REMAP1 + ["redirect http://new.test/ http://c.test/new/"]
REMAP_BAD = REMAP2 + ["map http://broken.test/"]     # line 3: no target


@harness.timeout(150)
def test_init_script_cycle():
    inst = InitInstance(REMAP1)
    try:
        _init_cycle(inst)
    except BaseException:
        inst.failed = True
        inst.run("stop")
        raise
    finally:
        note = inst.cleanup()
        if note:
            print("    " + note)


def _init_cycle(inst):
    r = inst.run("status")
    expect_eq(r.rc, 3, "status before start (output %r)" % r.out)

    r = inst.run("start")
    expect_eq(r.rc, 0, "start (output %r)" % r.out)
    pid = inst.master_pid()
    expect(pid and harness._alive(pid), "no live master after start")
    inst.track()
    expect(len(inst.pids) >= 3, "master and 2 workers expected, got %s"
           % sorted(inst.pids))
    r = inst.run("status")
    expect_eq(r.rc, 0, "status while running (output %r)" % r.out)
    expect(str(pid) in r.out, "status does not name pid %d: %r" % (pid, r.out))

    # start again: a no-op success, the same master
    r = inst.run("start")
    expect_eq(r.rc, 0, "second start (output %r)" % r.out)
    expect_eq(inst.master_pid(), pid, "master pid after a second start")

    port = inst.port()
    expect_eq(get(port, "a.test").status, 301, "a.test before reload")
    expect_eq(get(port, "new.test").status, 404, "new.test before reload")

    # reload with a good change: the new rule answers
    harness.write_confdir(inst.confdir, remap=REMAP2, workers=2)
    r = inst.run("reload")
    expect_eq(r.rc, 0, "reload of a good config (output %r)" % r.out)
    inst.track()
    r2 = get(port, "new.test")
    expect_eq(r2.status, 301, "new.test after reload")
    expect_eq(r2.header("Location"), "http://c.test/new/x", "Location")
    expect_eq(inst.master_pid(), pid, "master pid after reload")

    # a broken file: configtest names file:line, reload and restart refuse
    harness.write_confdir(inst.confdir, remap=REMAP_BAD, workers=2)
    r = inst.run("configtest")
    expect(r.rc != 0, "configtest of a broken config exits 0 (%r)" % r.out)
    expect(re.search(r"remap\.config:3: \S", r.out),
           "configtest output lacks remap.config:3: message: %r" % r.out)
    seq_before = _reload_seq(inst)
    r = inst.run("reload")
    expect(r.rc != 0, "reload of a broken config exits 0 (%r)" % r.out)
    expect(re.search(r"remap\.config:3: \S", r.out),
           "reload refusal does not show the error: %r" % r.out)
    expect_eq(_reload_seq(inst), seq_before,
              "the master was signalled despite the broken config")
    r = inst.run("force-reload")
    expect(r.rc != 0, "force-reload of a broken config exits 0 (%r)" % r.out)
    r = inst.run("restart")
    expect(r.rc != 0, "restart with a broken config exits 0 (%r)" % r.out)
    expect(re.search(r"remap\.config:3: \S", r.out),
           "restart refusal does not show the error: %r" % r.out)
    expect_eq(inst.master_pid(), pid, "master pid after the refused restart")
    expect(harness._alive(pid), "the refused restart stopped the master")
    # the old config still serves
    expect_eq(get(port, "new.test").status, 301, "new.test after refusals")
    expect_eq(get(port, "broken.test").status, 404, "broken.test")

    # restart with a good config: a new master on the same config
    harness.write_confdir(inst.confdir, remap=REMAP2, workers=2)
    r = inst.run("restart")
    expect_eq(r.rc, 0, "restart (output %r)" % r.out)
    expect(not harness._alive(pid), "old master %d still alive after restart"
           % pid)
    pid = inst.master_pid()
    expect(pid and harness._alive(pid), "no master after restart")
    inst.track()
    expect_eq(get(inst.port(), "new.test").status, 301, "after restart")

    # stop works even with a broken config on disk, and is graceful
    harness.write_confdir(inst.confdir, remap=REMAP_BAD, workers=2)
    r = inst.run("stop")
    expect_eq(r.rc, 0, "stop (output %r)" % r.out)
    harness.wait_for(lambda: not inst.alive(), 5,
                     what="every process of the instance to exit")
    r = inst.run("status")
    expect_eq(r.rc, 3, "status after stop (output %r)" % r.out)
    r = inst.run("stop")
    expect_eq(r.rc, 0, "stop when stopped (output %r)" % r.out)
    log = inst.error_log()
    expect(re.search(r"graceful stop \(SIGQUIT\)", log),
           "stop was not graceful (no SIGQUIT line in error.log)")
    bad = [ln for ln in log.splitlines()
           if re.search(r"\[(error|crit)\]", ln)]
    expect(not bad, "error log lines: %s" % bad[:5])


def _reload_seq(inst):
    try:
        with open(os.path.join(inst.run_dir, "reload.status")) as f:
            return f.read().split()[0]
    except (OSError, IndexError):
        return None


def test_init_script_stale_pid_file():
    """A master killed with SIGKILL leaves its pid file: status says dead
    (1), start starts anyway, stop stops."""
    inst = InitInstance(REMAP1)
    try:
        r = inst.run("start")
        expect_eq(r.rc, 0, "start (output %r)" % r.out)
        inst.track()
        pid = inst.master_pid()
        os.kill(pid, signal.SIGKILL)
        harness.wait_for(lambda: not inst.alive(), 5,
                         what="the killed instance to exit")
        r = inst.run("status")
        expect_eq(r.rc, 1, "status with a stale pid file (output %r)" % r.out)
        r = inst.run("start")
        expect_eq(r.rc, 0, "start over a stale pid file (output %r)" % r.out)
        inst.track()
        expect(inst.master_pid() != pid, "pid file not rewritten")
        r = inst.run("stop")
        expect_eq(r.rc, 0, "stop (output %r)" % r.out)
        harness.wait_for(lambda: not inst.alive(), 5,
                         what="every process of the instance to exit")
    except BaseException:
        inst.failed = True
        inst.run("stop")
        raise
    finally:
        note = inst.cleanup()
        if note:
            print("    " + note)


def test_init_script_usage_and_lsb_header():
    with open(os.path.join(SRCDIR, "scripts", "cistern.init")) as f:
        text = f.read()
    m = re.search(r"^### BEGIN INIT INFO\n(.*?)^### END INIT INFO$", text,
                  re.S | re.M)
    expect(m, "no LSB INIT INFO block")
    for key in ("Provides", "Required-Start", "Required-Stop",
                "Default-Start", "Default-Stop", "Short-Description"):
        expect(re.search(r"^# %s:\s+\S" % key, m.group(1), re.M),
               "INIT INFO lacks %s" % key)
    inst = InitInstance(REMAP1)
    try:
        r = inst.run("bogus")
        expect_eq(r.rc, 2, "exit status for an unknown action")
        expect("Usage:" in r.out, "no usage line: %r" % r.out)
        r = inst.run("reload")
        expect(r.rc == 7, "reload when stopped: want LSB 7, got %d (%r)"
               % (r.rc, r.out))
    finally:
        inst.cleanup()


def test_shellcheck_init_script():
    sc = shutil.which("shellcheck")
    if not sc:
        raise harness.SkipTest("shellcheck not installed")
    p = subprocess.run([sc, "-s", "sh", os.path.join(SRCDIR, "scripts",
                                                     "cistern.init")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    expect_eq(p.returncode, 0, "shellcheck:\n" + p.stdout.decode())


def _subst(text, d):
    for k, v in d.items():
        text = text.replace("@%s@" % k, v)
    return text


def test_systemd_unit_verifies():
    sa = shutil.which("systemd-analyze")
    with open(os.path.join(SRCDIR, "scripts", "cistern.service.in")) as f:
        unit = f.read()
    for want in (r"^ExecStartPre=\S+ -t ", r"^ExecReload=.* -s reload$",
                 r"^KillSignal=SIGQUIT$", r"^KillMode=mixed$",
                 r"^Type=forking$", r"^PIDFile=", r"^Restart=on-failure$"):
        expect(re.search(want, unit, re.M), "unit lacks /%s/" % want)
    if not sa:
        raise harness.SkipTest("systemd-analyze not installed "
                               "(static checks passed)")
    d = tempfile.mkdtemp(prefix="cistern-unit-")
    try:
        path = os.path.join(d, "cistern.service")
        # man:cistern(8) is not installed here: verify would run man.
        unit = re.sub(r"^Documentation=.*\n", "", unit, flags=re.M)
        with open(path, "w") as f:
            f.write(_subst(unit, {
                "sbindir": os.path.dirname(harness.cistern_bin()),
                "sysconfdir": d, "runstatedir": "/run",
                "localstatedir": "/var"}))
        p = subprocess.run([sa, "verify", path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode("utf-8", "replace")
        # Only complaints about our unit count: a container without a
        # running systemd also reports on its own environment.
        ours = [ln for ln in out.splitlines() if "cistern.service" in ln]
        expect(not ours, "systemd-analyze verify:\n" + out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_logrotate_snippet():
    with open(os.path.join(SRCDIR, "scripts", "cistern.logrotate")) as f:
        text = f.read()
    for want in ("daily", "rotate 14", "compress", "delaycompress",
                 "missingok", "notifempty", "sharedscripts", "postrotate",
                 "-s reopen", "@localstatedir@/log/cistern/*.log"):
        expect(want in text, "snippet lacks %r" % want)
    lr = shutil.which("logrotate")
    if not lr:
        raise harness.SkipTest("logrotate not installed (static checks passed)")
    d = tempfile.mkdtemp(prefix="cistern-lr-")
    try:
        os.makedirs(os.path.join(d, "log", "cistern"))
        conf = os.path.join(d, "cistern")
        with open(conf, "w") as f:
            f.write(_subst(text, {"localstatedir": d, "sbindir": "/bin",
                                  "sysconfdir": d}))
        p = subprocess.run([lr, "-d", "-s", os.path.join(d, "state"), conf],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = p.stdout.decode("utf-8", "replace")
        expect_eq(p.returncode, 0, "logrotate -d:\n" + out)
        expect("error" not in out.lower(), "logrotate -d:\n" + out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------
# Privilege drop

def test_unknown_user_is_a_config_error():
    r = harness.check_config(records={
        "proxy.config.admin.user_id": "no-such-user-cistern"})
    expect_eq(r.rc, 1, "-t with an unknown user (stderr %r)" % r.stderr)
    expect(re.search(r'records\.config:\d+: proxy\.config\.admin\.user_id: '
                     r'no such user "no-such-user-cistern"', r.stderr),
           "message in %r" % r.stderr)
    for ok in ("nobody", "#-1", "#0"):
        r = harness.check_config(records={"proxy.config.admin.user_id": ok})
        expect_eq(r.rc, 0, "-t with user %r (stderr %r)" % (ok, r.stderr))


def _ids(pid):
    """(uids, gids, groups) of pid from /proc/PID/status."""
    uids = gids = groups = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "Uid":
                uids = [int(x) for x in v.split()]
            elif k == "Gid":
                gids = [int(x) for x in v.split()]
            elif k == "Groups":
                groups = sorted(int(x) for x in v.split())
    return uids, gids, groups


_need_root_and_nobody = harness.need_root_and_nobody


@harness.timeout(120)
def test_workers_run_as_nobody_and_serve_hits():
    nobody = _need_root_and_nobody()
    with Origin() as o:
        c = Cistern(records={"proxy.config.admin.user_id": "nobody"},
                    storage=["cache 64M"], workers=2, start=False,
                    remap=["map http://p.test/ http://%s/" % o.authority])
        try:
            # mkdtemp made the instance's folder 0700: the workers must be
            # able to walk down to the store and the logs.
            os.chmod(c.tmpdir, 0o755)
            c.start()
        except BaseException:
            c._abort()
            raise
        with c:
            master = _ids(c.pid)
            expect_eq(master[0], [0, 0, 0, 0], "master uids")
            kids = harness.children_of(c.pid)
            expect_eq(len(kids), 3, "children (2 workers + cache manager): %s"
                      % kids)
            for k in kids:
                uids, gids, groups = _ids(k)
                expect_eq(uids, [nobody.pw_uid] * 4, "uids of child %d" % k)
                expect_eq(gids, [nobody.pw_gid] * 4, "gids of child %d" % k)
                expect(0 not in groups, "child %d keeps group root: %s"
                       % (k, groups))
            store = os.path.join(c.confdir, "cache")
            for p in [store] + [os.path.join(store, n)
                                for n in os.listdir(store)]:
                expect_eq(os.lstat(p).st_uid, nobody.pw_uid, "owner of %s" % p)
            expect_eq(os.stat(c.log_dir).st_uid, nobody.pw_uid,
                      "owner of the log directory")
            expect_eq(os.stat(c.run_dir).st_uid, 0, "owner of the run dir")
            expect(re.search(r"store directory \S+ now belongs to user nobody",
                             c.error_log()), "no chown notice in the log")

            path = "/headers?Cache-Control=max-age%3D60"
            r1 = curl([c.url(path), "-H", "Host: p.test"])
            expect_eq(r1.status, 200, "first GET")
            r2 = curl([c.url(path), "-H", "Host: p.test"])
            expect_eq(r2.status, 200, "second GET")
            cs = r2.header("Cache-Status", "")
            expect(re.search(r"cistern; hit\b", cs),
                   "second GET not a hit: Cache-Status %r" % cs)
            expect_eq(r2.header("X-Origin-Seq"), r1.header("X-Origin-Seq"),
                      "the hit reached the origin")

            # Log reopen: the workers (nobody) reopen the file the master
            # (root) recreated.
            os.rename(os.path.join(c.log_dir, "error.log"),
                      os.path.join(c.log_dir, "error.log.1"))
            c.signal(signal.SIGUSR1)
            c.wait_log(r"log files reopened", 5)
            expect_eq(os.stat(os.path.join(c.log_dir, "error.log")).st_uid,
                      nobody.pw_uid, "owner of the reopened error.log")
            time.sleep(0.3)     # let the workers handle their SIGUSR1
            old = harness._read(os.path.join(c.log_dir, "error.log.1"))
            expect(not re.search(r"reopening the error log", old
                                 + c.error_log()),
                   "a worker failed to reopen the log")


def test_unreachable_store_is_reported():
    """The store below a folder nobody cannot search: the cache is disabled
    with a reason, not a mystery in the workers."""
    _need_root_and_nobody()
    with Cistern(records={"proxy.config.admin.user_id": "nobody"},
                 storage=["cache 64M"], workers=1) as c:
        # the instance's tmpdir is 0700 (mkdtemp)
        c.expect_log(r"cache disabled: store \S+: user nobody cannot use")
        # the log directory is out of reach as well
        c.expect_log(r"cannot open the access log .*Permission denied")
        c.wait_log(r"cache disabled: store \S+: user nobody cannot use \S+: "
                   r"Permission denied", 5)


def test_not_root_keeps_user():
    """Started as another user than root, the setting cannot apply: a
    notice, and the daemon runs as that user."""
    nobody = _need_root_and_nobody()
    sp = shutil.which("setpriv")
    if not sp:
        raise harness.SkipTest("setpriv (util-linux) not installed")
    d = tempfile.mkdtemp(prefix="cistern-nr-")
    try:
        os.chmod(d, 0o777)
        conf = os.path.join(d, "conf")
        harness.write_confdir(conf, records={
            "proxy.config.admin.user_id": "nobody"}, remap=REMAP1, workers=1)
        os.chmod(conf, 0o777)
        as_nobody = [sp, "--reuid=%d" % nobody.pw_uid,
                     "--regid=%d" % nobody.pw_gid, "--clear-groups",
                     harness.cistern_bin(), "-c", conf]
        env = harness._sanitizer_env(None)
        p = subprocess.run(as_nobody, env=env, cwd=d, timeout=30,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        expect_eq(p.returncode, 0, "start as nobody (stderr %r)" % p.stderr)
        pid = None
        try:
            with open(os.path.join(conf, "run", "cistern.pid")) as f:
                pid = int(f.read())
            expect_eq(_ids(pid)[0][0], nobody.pw_uid, "master uid")
            log = harness._read(os.path.join(conf, "log", "error.log"))
            expect(re.search(r'\[notice\] .*not started as root: '
                             r'proxy\.config\.admin\.user_id "nobody" does '
                             r'not apply', log), "no notice in %r" % log)
        finally:
            subprocess.run(as_nobody + ["-s", "stop"], env=env, timeout=30)
            if pid:
                harness.wait_for(lambda: not harness._alive(pid), 10,
                                 what="the master to exit")
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_user_change_needs_restart():
    _need_root_and_nobody()
    with Cistern(remap=REMAP1, workers=1) as c:
        c.write_file("records.config", harness._text([
            "CONFIG proxy.config.http.server_ports STRING 0",
            "CONFIG proxy.config.cistern.run_dir STRING run",
            "CONFIG proxy.config.log.logfile_dir STRING log",
            "CONFIG proxy.config.cistern.workers INT 1",
            "CONFIG proxy.config.admin.user_id STRING nobody"]))
        c.reload(wait_log=r"reload ok")
        c.wait_log(r"proxy\.config\.admin\.user_id changed: needs a restart; "
                   r"keeping #-1", 5)
        for k in harness.children_of(c.pid):
            expect_eq(_ids(k)[0][0], 0, "uid of child %d after reload" % k)


if __name__ == "__main__":
    harness.main()
