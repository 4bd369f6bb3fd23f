"""t/harness.py: the end-to-end test harness for Cistern.

Every t/test_*.py imports this module.  It starts the real daemon from a
private temporary config directory on kernel-chosen ports, starts real
origins (t/origin.py), talks to them with raw sockets, curl and ab, and at
teardown fails the test on any unexpected [error]/[crit] line in the error
log, any sanitizer report, a daemon that does not stop on SIGTERM, a non-zero
exit status, or a process of the instance left behind.

Contract with automake: run as `python3 -B t/test_x.py [test_name ...]` with
CISTERN_BIN (the daemon) and CISTERN_SRCDIR (read-only source dir) in the
environment; exit 0 pass, 1 fail, 77 skip, 99 hard error.  Tests may run in
parallel: nothing here uses a fixed port or a shared directory.

Set CISTERN_KEEP=1 to keep every temp dir (they are kept on failure anyway)
and CISTERN_TEST_VERBOSE=1 to print the daemon's log on failure.

See t/README.md for how to write a test.
"""

import base64
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
from origin import pattern, seeded  # noqa: E402,F401  (re-exported)

PYTHON = sys.executable or "/usr/bin/python3"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

SANITIZER_RE = re.compile(
    r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
    r"SUMMARY: UndefinedBehaviorSanitizer|SUMMARY: AddressSanitizer")
# The master logs this once every worker of the first generation reported
# ready (master/master.c); start() waits for it after the ports file.
READY_LOG_RE = r"\[notice\] \[pid \d+\] cistern \S+ ready:"
LOG_LINE_RE = re.compile(r"^\S+ \[(debug|info|notice|warn|error|crit)\] ")
BAD_LEVELS = ("error", "crit")


# ---------------------------------------------------------------------------
# Failures and small assertion helpers

class TestFailure(AssertionError):
    """A test failed: the message says why."""


class SkipTest(Exception):
    """Raise to skip a test (reported as SKIP)."""


class HarnessError(Exception):
    """The harness could not do what was asked (e.g. daemon failed to
    start).  Reported as a FAIL of the test that asked."""


def fail(msg):
    raise TestFailure(msg)


def expect(cond, msg):
    """Fail with msg unless cond."""
    if not cond:
        raise TestFailure(msg)


def expect_eq(actual, expected, what="value"):
    if actual != expected:
        raise TestFailure("%s: expected %r, got %r" % (what, expected,
                                                        _short(actual)))


def expect_in(needle, haystack, what="value"):
    if needle not in haystack:
        raise TestFailure("%s: %r not found in %r" % (what, needle,
                                                      _short(haystack)))


def _short(v, n=600):
    r = v
    if isinstance(v, (bytes, str)) and len(v) > n:
        r = v[:n] + (b"..." if isinstance(v, bytes) else "...")
    return r


def wait_for(fn, timeout=5.0, interval=0.01, what="condition"):
    """Poll fn() until it returns a true value; return that value.  Raise
    TestFailure after timeout seconds.  The interval grows to 0.1 s."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestFailure("timed out after %.1fs waiting for %s"
                              % (timeout, what))
        time.sleep(interval)
        interval = min(interval * 1.5, 0.1)


def log_lines(c, name, n, timeout=5):
    """The lines of log_dir/name, once there are at least n of them
    (workers flush each second)."""
    path = os.path.join(c.log_dir, name)

    def read():
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        return lines if len(lines) >= n else None
    return wait_for(read, timeout, what="%d lines in %s" % (n, name))


def access_lines(c, n, timeout=5):
    """The daemon's access log lines, once there are at least n of them."""
    return log_lines(c, "access.log", n, timeout)


class Collector:
    """Collect several sub-case failures and fail once, listing them all:

        with Collector() as c:
            for case in cases:
                with c.case(name):
                    ...asserts...
    """

    def __init__(self):
        self.errors = []

    def case(self, name):
        coll = self

        class _Case:
            def __enter__(self):
                return self

            def __exit__(self, et, ev, tb):
                if et is not None and issubclass(et, AssertionError):
                    coll.errors.append("%s: %s" % (name, ev))
                    return True
                if et is not None and issubclass(et, (OSError,
                                                      HarnessError)):
                    coll.errors.append("%s: %s: %s" % (name, et.__name__,
                                                       ev))
                    return True
                return False
        return _Case()

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None and self.errors:
            raise TestFailure("%d case(s) failed:\n    " % len(self.errors)
                              + "\n    ".join(self.errors))
        return False


def need_root_and_nobody():
    """Skip unless running as root with a user `nobody` to drop to (the
    privilege-drop tests); returns nobody's passwd entry."""
    import pwd
    if os.geteuid() != 0:
        raise SkipTest("needs root (the privilege drop)")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        raise SkipTest("no user nobody on this system")


# ---------------------------------------------------------------------------
# Locating the daemon

def cistern_bin():
    """The daemon under test: $CISTERN_BIN, else ../cistern next to t/."""
    b = os.environ.get("CISTERN_BIN")
    if not b:
        b = os.path.join(os.path.dirname(HERE), "cistern")
    return os.path.abspath(b)


def srcdir():
    return os.environ.get("CISTERN_SRCDIR") or os.path.dirname(HERE)


_SANITIZED = {}


def sanitizer_build():
    """True when the daemon is built with AddressSanitizer or UBSan (gcc
    links their runtimes, clang puts them inside: either way the binary
    names __asan_init or __ubsan_handle_...)."""
    b = cistern_bin()
    if b not in _SANITIZED:
        try:
            with open(b, "rb") as f:
                data = f.read()
            _SANITIZED[b] = b"__asan_init" in data or b"__ubsan_handle" in data
        except OSError:
            _SANITIZED[b] = False
    return _SANITIZED[b]


def _sanitizer_env(env=None):
    e = dict(os.environ)
    if env:
        e.update(env)
    asan = e.get("ASAN_OPTIONS", "")
    opts = [o for o in asan.split(":") if o and not o.startswith("log_path")]
    keys = {o.split("=", 1)[0] for o in opts}
    for k, v in (("detect_leaks", "1"), ("abort_on_error", "0")):
        if k not in keys:
            opts.append("%s=%s" % (k, v))
    e["ASAN_OPTIONS"] = ":".join(opts)
    ub = e.get("UBSAN_OPTIONS", "")
    opts = [o for o in ub.split(":") if o]
    keys = {o.split("=", 1)[0] for o in opts}
    for k, v in (("print_stacktrace", "1"), ("halt_on_error", "1")):
        if k not in keys:
            opts.append("%s=%s" % (k, v))
    e["UBSAN_OPTIONS"] = ":".join(opts)
    return e


# ---------------------------------------------------------------------------
# Config directories

BASE_RECORDS = [
    ("proxy.config.http.server_ports", "STRING", "0"),
    ("proxy.config.cistern.run_dir", "STRING", "run"),
    ("proxy.config.log.logfile_dir", "STRING", "log"),
    # Tests run as root in CI: keep the starting user (test_ops.py has the
    # dedicated privilege-drop test).
    ("proxy.config.admin.user_id", "STRING", "#-1"),
]


def _record_line(name, value):
    if isinstance(value, tuple):
        typ, val = value
    elif isinstance(value, bool):
        typ, val = "INT", int(value)
    elif isinstance(value, int):
        typ, val = "INT", value
    elif isinstance(value, float):
        typ, val = "FLOAT", value
    else:
        typ, val = "STRING", value
    return "CONFIG %s %s %s" % (name, typ, val)


def _text(lines):
    if lines is None:
        return None
    if isinstance(lines, (bytes, bytearray)):
        return bytes(lines).decode("latin-1")
    if isinstance(lines, str):
        return lines if lines.endswith("\n") or not lines else lines + "\n"
    return "".join(line + "\n" for line in lines)


def write_confdir(confdir, records=None, remap=None, ip_allow=None,
                  storage=None, workers=2, files=None, records_text=None):
    """Write a config directory.

    records: a dict {name: value} (int -> INT, str -> STRING, or a
      (TYPE, value) tuple) merged over the harness defaults (port 0, run dir
      "run", log dir "log", `workers` workers), or a list of extra lines
      appended after the defaults.  records_text: the exact file content
      instead (no defaults at all).
    remap, ip_allow, storage: a list of lines or a string; None = no file
      (remap.config is always written, empty if None).
    files: {relative name: text or bytes} written as well.
    """
    os.makedirs(confdir, exist_ok=True)
    if records_text is not None:
        rec = _text(records_text)
    else:
        recs = {n: (t, v) for n, t, v in BASE_RECORDS}
        if workers is not None:
            recs["proxy.config.cistern.workers"] = ("INT", workers)
        extra_lines = []
        if isinstance(records, dict):
            for k, v in records.items():
                recs[k] = v
        elif records:
            extra_lines = list(records) if not isinstance(records, str) \
                else records.splitlines()
        rec = "".join(_record_line(k, v) + "\n" for k, v in recs.items())
        rec += "".join(line + "\n" for line in extra_lines)
    _write(os.path.join(confdir, "records.config"), rec)
    _write(os.path.join(confdir, "remap.config"), _text(remap) or "")
    if ip_allow is not None:
        _write(os.path.join(confdir, "ip_allow.config"), _text(ip_allow))
    if storage is not None:
        _write(os.path.join(confdir, "storage.config"), _text(storage))
    for name, content in (files or {}).items():
        p = os.path.join(confdir, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        _write(p, content)


def _write(path, content):
    mode = "wb" if isinstance(content, (bytes, bytearray)) else "w"
    with open(path, mode) as f:
        f.write(content)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


class Result:
    """The outcome of running a command: rc, stdout, stderr (str)."""

    def __init__(self, rc, stdout, stderr, elapsed=0.0, timed_out=False):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.elapsed, self.timed_out = elapsed, timed_out

    def __repr__(self):
        return "Result(rc=%r, stdout=%r, stderr=%r)" % (
            self.rc, _short(self.stdout, 300), _short(self.stderr, 300))


def run_cistern(args, timeout=15.0, env=None, cwd=None):
    """Run the daemon binary with args (list) to completion, in its own
    session; on timeout kill its whole process group and return
    Result(timed_out=True).  For `-t` checks and instances expected to
    refuse to start."""
    t0 = time.monotonic()
    p = subprocess.Popen([cistern_bin()] + list(args), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=_sanitizer_env(env),
                         cwd=cwd, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        _killpg(p.pid)
        out, err = p.communicate()
        timed_out = True
    r = Result(p.returncode, out.decode("utf-8", "replace"),
               err.decode("utf-8", "replace"), time.monotonic() - t0,
               timed_out)
    # A config check must not leave anything behind either.
    _killpg(p.pid)
    return r


def check_config(records=None, remap=None, ip_allow=None, storage=None,
                 workers=2, files=None, records_text=None, keep=False):
    """Write a config dir and run `cistern -c DIR -t` on it.  Returns a
    Result with .confdir set."""
    d = tempfile.mkdtemp(prefix="cistern-t-")
    confdir = os.path.join(d, "conf")
    write_confdir(confdir, records, remap, ip_allow, storage, workers, files,
                  records_text)
    r = run_cistern(["-c", confdir, "-t"], cwd=d)
    r.confdir = confdir
    sanit = SANITIZER_RE.search(r.stderr)
    if not keep and not os.environ.get("CISTERN_KEEP"):
        shutil.rmtree(d, ignore_errors=True)
    if sanit:
        raise TestFailure("sanitizer report from `cistern -t`:\n" + r.stderr)
    return r


# ---------------------------------------------------------------------------
# /proc helpers

def listen_inodes(port):
    """Inodes of the TCP sockets listening on port (IPv4 and IPv6)."""
    return tcp_inodes(port)


def tcp_inodes(port, listening=True):
    """Inodes of the TCP sockets on local port (IPv4 and IPv6): listening,
    or (listening=False) every other one (accepted connections, in any
    state)."""
    out = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                lines = fh.read().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            p = ln.split()
            if len(p) > 9 and (p[3] == "0A") == listening \
                    and int(p[1].rsplit(":", 1)[1], 16) == port:
                out.add("socket:[%s]" % p[9])
    return out


def _proc_stat(pid):
    """(ppid, pgrp, session, state) of pid, or None."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            s = f.read().decode("latin-1")
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[2]), int(rest[3]), rest[0]


def _all_pids():
    return [int(x) for x in os.listdir("/proc") if x.isdigit()]


def children_of(pid):
    """Live (non-zombie) children of pid, from /proc."""
    out = []
    for p in _all_pids():
        st = _proc_stat(p)
        if st and st[0] == pid and st[3] != "Z":
            out.append(p)
    return sorted(out)


def descendants_of(pid):
    """Every live descendant of pid (children, grandchildren...)."""
    kids = {}
    for p in _all_pids():
        st = _proc_stat(p)
        if st and st[3] != "Z":
            kids.setdefault(st[0], []).append(p)
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return sorted(out)


def dhat_worker_blocks(d, pids):
    """The most heap blocks any of pids allocated in its lifetime, from the
    dhat.PID files valgrind --tool=dhat wrote in d (removed after, unless
    CISTERN_KEEP_DHAT is set): with several children (a worker, the cache
    manager) the worker is the one that allocated the most."""
    import json
    import shutil
    blocks = {}
    for name in os.listdir(d):
        if name.startswith("dhat."):
            with open(os.path.join(d, name)) as f:
                blocks[name[5:]] = sum(p["tbk"] for p in json.load(f)["pps"])
    if os.environ.get("CISTERN_KEEP_DHAT"):
        print("    dhat files in %s (children %s)" % (d, pids))
    else:
        shutil.rmtree(d, ignore_errors=True)
    kids = [blocks[p] for p in pids if p in blocks]
    expect(kids, "no dhat output for the children %s (have %s)" % (pids, sorted(blocks)))
    return max(kids)


def rss_anon(pid):
    """RssAnon of pid in bytes (0 if it is gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _alive(pid):
    st = _proc_stat(pid)
    return st is not None and st[3] != "Z"


def session_members(sid):
    """Live processes whose session id is sid (zombies excluded)."""
    out = []
    for p in _all_pids():
        st = _proc_stat(p)
        if st and st[2] == sid and st[3] != "Z":
            out.append(p)
    return sorted(out)


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode("latin-1").strip()
    except OSError:
        return ""


def _killpg(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------------------
# The daemon

class Cistern:
    """One private daemon instance.

        with Cistern(records={...}, remap=["redirect http://a/ http://b/"]) as c:
            r = curl([c.url("/x"), "-H", "Host: a"])

    Constructor arguments: see write_confdir() (records, remap, ip_allow,
    storage, workers, files, records_text), plus env (extra environment for
    the daemon), args (extra command-line arguments), start (False to only
    write the config; call .start() yourself), wait_ready (False: return as
    soon as the ports file exists and a TCP connect succeeds, without
    waiting for the master's "ready" log line).

    Attributes after start: port (the first server port), ports, pid (the
    master), confdir, run_dir, log_dir, tmpdir.  Teardown (.stop(), or
    leaving the with block) fails the test on problems; .check() runs the
    log and sanitizer checks alone.
    """

    def __init__(self, records=None, remap=None, ip_allow=None, storage=None,
                 workers=2, env=None, files=None, records_text=None,
                 args=None, start=True, start_timeout=START_TIMEOUT,
                 wait_ready=True):
        self.tmpdir = tempfile.mkdtemp(prefix="cistern-t-")
        self.confdir = os.path.join(self.tmpdir, "conf")
        self.run_dir = os.path.join(self.confdir, "run")
        self.log_dir = os.path.join(self.confdir, "log")
        self.stdout_path = os.path.join(self.tmpdir, "stdout")
        self.stderr_path = os.path.join(self.tmpdir, "stderr")
        write_confdir(self.confdir, records, remap, ip_allow, storage,
                      workers, files, records_text)
        self.env = env
        self.args = list(args or [])
        self.start_timeout = start_timeout
        self.wait_ready = wait_ready
        self.proc = None
        self.pid = None
        self.ports = []
        self.port = None
        self.expected = []
        self.problems = []
        self.stopped = False
        self._failed = False
        if start:
            try:
                self.start()
            except BaseException:
                self._abort()
                raise

    # -- lifecycle -------------------------------------------------------
    def start(self):
        """Start the daemon and wait until it accepts connections."""
        os.makedirs(self.run_dir, exist_ok=True)
        os.makedirs(self.log_dir, exist_ok=True)
        ports_file = os.path.join(self.run_dir, "ports")
        try:
            os.unlink(ports_file)
        except FileNotFoundError:
            pass
        log_start = self.log_size()
        self._out = open(self.stdout_path, "ab")
        self._err = open(self.stderr_path, "ab")
        binary = cistern_bin()
        if not os.access(binary, os.X_OK):
            raise SkipTest("no daemon binary at %s" % binary)
        self.proc = subprocess.Popen(
            [binary, "-c", self.confdir, "-f"] + self.args,
            stdin=subprocess.DEVNULL, stdout=self._out, stderr=self._err,
            env=_sanitizer_env(self.env), cwd=self.tmpdir,
            start_new_session=True)
        self.pid = self.proc.pid
        self.stopped = False

        def ready():
            if self.proc.poll() is not None:
                raise HarnessError(
                    "daemon exited with status %s before it was ready; "
                    "stderr:\n%s" % (self.proc.returncode,
                                     _short(self.stderr(), 4000)))
            try:
                with open(ports_file) as f:
                    txt = f.read()
            except FileNotFoundError:
                return None
            ports = [int(x) for x in txt.split()]
            return ports or None
        try:
            self.ports = wait_for(ready, self.start_timeout,
                                  what="%s to appear" % ports_file)
        except TestFailure as e:
            raise HarnessError("%s; stderr:\n%s" % (e, _short(self.stderr(),
                                                               4000)))
        self.port = self.ports[0]

        def connects():
            if self.proc.poll() is not None:
                raise HarnessError("daemon exited with status %s; stderr:\n%s"
                                   % (self.proc.returncode, self.stderr()))
            try:
                socket.create_connection(("127.0.0.1", self.port),
                                         timeout=1).close()
                return True
            except OSError:
                return False
        try:
            wait_for(connects, self.start_timeout,
                     what="a connection to port %d" % self.port)
            if self.wait_ready:
                self.wait_log(READY_LOG_RE, self.start_timeout, log_start)
        except TestFailure as e:
            raise HarnessError("%s; stderr:\n%s" % (e, _short(self.stderr(),
                                                               4000)))
        return self

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is not None:
            # The test already failed: still stop and report teardown
            # problems, but let the original exception win.
            self._failed = True
            try:
                self.stop(raise_on_problems=False)
            except Exception as e:  # noqa: BLE001
                self.problems.append("teardown error: %r" % e)
            notes = ["teardown: " + p for p in self.problems]
            notes.append(self._cleanup())
            if ev is not None and hasattr(ev, "add_note"):
                for n in notes:
                    if n:
                        ev.add_note(n)
            return False
        self.stop()
        return False

    def _abort(self):
        """Constructor failed: kill everything, keep the tmpdir."""
        self._failed = True
        if self.proc and self.proc.poll() is None:
            _killpg(self.pid)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.pid:
            _killpg(self.pid)
        self._close_files()
        self._cleanup()

    def _close_files(self):
        for f in (getattr(self, "_out", None), getattr(self, "_err", None)):
            if f:
                f.close()

    def stop(self, raise_on_problems=True):
        """SIGTERM; wait up to 10 s for the master to exit with status 0
        and for every process of the instance to go; then run the log and
        sanitizer checks.  Raises TestFailure listing every problem."""
        if self.proc is not None and not self.stopped:
            self.stopped = True
            # Everything the master started, in case a worker left the
            # session: checked along with the session after the stop.
            family = []
            if self.proc.poll() is not None:
                self.problems.append(
                    "daemon had already exited (status %s) before teardown"
                    % self.proc.returncode)
            else:
                family = descendants_of(self.pid)
                os.kill(self.pid, signal.SIGTERM)
                try:
                    self.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.problems.append(
                        "master did not exit within %.0fs of SIGTERM; "
                        "killed" % STOP_TIMEOUT)
                    _killpg(self.pid)
                    self.proc.wait(5)
                else:
                    if self.proc.returncode != 0:
                        self.problems.append(
                            "master exit status after SIGTERM: %s (want 0)"
                            % self.proc.returncode)
            # Workers must die with the master.  Give them a moment to
            # finish exiting (they may be reaped by init), then kill.
            def leftovers():
                return sorted(set(session_members(self.pid))
                              | {p for p in family if _alive(p)})
            try:
                wait_for(lambda: not leftovers(), timeout=3.0,
                         what="the instance's processes to exit")
            except TestFailure:
                left = leftovers()
                for p in left:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                self.problems.append(
                    "processes of the instance still alive after the "
                    "master exited: %s" % ", ".join(
                        "%d (%s)" % (p, _cmdline(p)) for p in left))
                _killpg(self.pid)
            self._close_files()
        self.problems += self.check_problems()
        if self.problems and raise_on_problems:
            self._failed = True
            probs, self.problems = self.problems, []
            kept = self._cleanup()
            raise TestFailure("teardown: " + "\n    teardown: ".join(probs)
                              + "\n" + kept)
        if raise_on_problems:
            kept = self._cleanup()
            if kept:
                print("    " + kept)

    def _cleanup(self):
        """Remove the temp dir unless the test failed (or CISTERN_KEEP);
        returns a note naming the kept dir, or ""."""
        if self._failed or os.environ.get("CISTERN_KEEP"):
            note = "(daemon temp dir kept: %s)" % self.tmpdir
            if os.environ.get("CISTERN_TEST_VERBOSE"):
                note += ("\n--- error.log ---\n" + self.error_log()
                         + "\n--- stderr ---\n" + self.stderr())
            return note
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        return ""

    def kill(self):
        """SIGKILL the whole instance (for crash tests); teardown then only
        runs the log checks."""
        _killpg(self.pid)
        if self.proc:
            self.proc.wait(5)
        self.stopped = True
        self._close_files()

    def restart(self):
        """Stop (with checks) and start again on the same config dir (the
        ports change unless records fix them)."""
        self.stop(raise_on_problems=False)
        if self.problems:
            self._failed = True
            raise TestFailure("teardown before restart: "
                              + "; ".join(self.problems))
        return self.start()

    # -- checks ----------------------------------------------------------
    def expect_log(self, regex):
        """Declare an [error]/[crit] error-log line matching regex as
        expected (re.search on the message part of the line)."""
        self.expected.append(re.compile(regex))

    def unexpected_log_lines(self):
        out = []
        for line in self.error_log().splitlines():
            m = LOG_LINE_RE.match(line)
            if not m or m.group(1) not in BAD_LEVELS:
                continue
            if any(r.search(line) for r in self.expected):
                continue
            out.append(line)
        return out

    def check_problems(self):
        probs = []
        bad = self.unexpected_log_lines()
        if bad:
            probs.append("unexpected error log lines:\n      "
                         + "\n      ".join(bad[:20]))
        for name, text in (("stderr", self.stderr()),
                           ("stdout", self.stdout())):
            m = SANITIZER_RE.search(text)
            if m:
                start = max(0, text.rfind("\n", 0, m.start()) - 2000)
                probs.append("sanitizer report in the daemon's %s:\n%s"
                             % (name, text[start:start + 6000]))
        return probs

    def check(self):
        """Run the log and sanitizer checks now; fail on problems."""
        probs = self.check_problems()
        if probs:
            raise TestFailure("; ".join(probs))

    # -- inspection ------------------------------------------------------
    def error_log(self):
        return _read(os.path.join(self.log_dir, "error.log"))

    def stdout(self):
        return _read(self.stdout_path)

    def stderr(self):
        return _read(self.stderr_path)

    def log_size(self):
        try:
            return os.path.getsize(os.path.join(self.log_dir, "error.log"))
        except OSError:
            return 0

    def wait_log(self, regex, timeout=5.0, since=0):
        """Poll the error log (from byte offset since) for a line matching
        regex; return the match object."""
        r = re.compile(regex, re.M)

        def find():
            with open(os.path.join(self.log_dir, "error.log"), "rb") as f:
                f.seek(since)
                return r.search(f.read().decode("utf-8", "replace"))
        return wait_for(lambda: os.path.exists(
            os.path.join(self.log_dir, "error.log")) and find(),
            timeout, what="error log line /%s/" % regex)

    def worker_pids(self):
        """The master's children (from /proc).  When the daemon names its
        processes (cmdline containing "worker"), only the workers."""
        kids = children_of(self.pid)
        named = [p for p in kids if "worker" in _cmdline(p)]
        return named or kids

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pids(self):
        """The master and every live process it started."""
        return [self.pid] + descendants_of(self.pid)

    def rss_anon(self):
        """Anonymous resident memory (RssAnon, bytes) summed over the
        master and all its descendants."""
        return sum(rss_anon(p) for p in self.pids())

    def signal(self, sig):
        os.kill(self.pid, sig)

    def reload(self, wait_log=None, timeout=10.0):
        """SIGHUP the master.  With wait_log, wait for a new error-log line
        matching that regex (e.g. the reload's success message)."""
        since = self.log_size()
        os.kill(self.pid, signal.SIGHUP)
        if wait_log:
            return self.wait_log(wait_log, timeout, since)
        return None

    def url(self, path="/", port=None):
        return "http://127.0.0.1:%d%s" % (port or self.port, path)

    def write_file(self, name, content):
        """(Re)write a file in the config dir (before a reload)."""
        _write(os.path.join(self.confdir, name), _text(content)
               if not isinstance(content, bytes) else content)


# ---------------------------------------------------------------------------
# The origin

class Origin:
    """A t/origin.py subprocess on a kernel-chosen port.

        with Origin() as o:
            ... o.port, o.url("/bytes/10"), o.requests(), o.reset(),
            o.script("/p", [{"status": 200, "headers": [...], "body": "x"}])

    Teardown fails the test if the origin printed a Python traceback.
    """

    def __init__(self, host="127.0.0.1"):
        self.host = host
        self.tmpdir = tempfile.mkdtemp(prefix="cistern-origin-")
        pf = os.path.join(self.tmpdir, "port")
        self.err_path = os.path.join(self.tmpdir, "stderr")
        self._err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(
            [PYTHON, "-B", os.path.join(HERE, "origin.py"), "--host", host,
             "--port", "0", "--port-file", pf],
            stdin=subprocess.DEVNULL, stdout=self._err, stderr=self._err,
            start_new_session=True)

        def ready():
            if self.proc.poll() is not None:
                raise HarnessError("origin exited: %s" % _read(self.err_path))
            try:
                with open(pf) as f:
                    return int(f.read().strip() or 0)
            except FileNotFoundError:
                return None
        try:
            self.port = wait_for(ready, START_TIMEOUT, what="the origin")
        except BaseException:
            self.stop(check=False)
            raise

    @property
    def authority(self):
        return "%s:%d" % (self.host, self.port)

    def url(self, path="/"):
        return "http://%s%s" % (self.authority, path)

    def _control(self, method, path, body=b""):
        req = ("%s %s HTTP/1.1\r\nHost: origin\r\nContent-Length: %d\r\n"
               "Connection: close\r\n\r\n" % (method, path, len(body))
               ).encode() + body
        data, _ = raw(self.port, req, timeout=10, host=self.host)
        rs = parse_responses(data)
        if not rs or rs[0].status != 200:
            raise HarnessError("origin control %s failed: %r" % (path, data))
        return json.loads(rs[0].body.decode() or "null")

    def requests(self):
        """Every request the origin received since the last reset: a list
        of dicts {seq, conn, method, target, path, version, headers (list of
        [name, value]), body (latin-1 str), trailers, client, time}."""
        return self._control("GET", "/__log")

    def reset(self):
        self._control("GET", "/__reset")

    def wait_requests(self, n, timeout=5.0):
        """Poll until at least n requests are recorded; return them all."""
        return wait_for(lambda: (lambda rs: rs if len(rs) >= n else None)(
            self.requests()), timeout, what="%d origin requests" % n)

    def stats(self):
        return self._control("GET", "/__stats")

    def conns(self):
        """The origin's connections (control ones excluded): a list of
        dicts {conn, opened, closed (time or None), end} where end is
        "peer-eof", "peer-reset", "origin" or "error" once closed."""
        return self._control("GET", "/__conns")

    def script(self, path, responses):
        """Script the responses for an exact path (used in order, the last
        repeats).  Each is a dict as described in origin.py; "body" may be
        bytes here (sent as body_b64), "raw" bytes as raw_b64."""
        out = []
        for r in responses:
            r = dict(r)
            if isinstance(r.get("body"), (bytes, bytearray)):
                r["body_b64"] = base64.b64encode(r.pop("body")).decode()
            if "raw" in r:
                r["raw_b64"] = base64.b64encode(r.pop("raw")).decode()
            out.append(r)
        self._control("POST", "/__script",
                      json.dumps({"path": path, "responses": out}).encode())

    def stop(self, check=True):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                _killpg(self.proc.pid)
                self.proc.wait(5)
        self._err.close()
        err = _read(self.err_path)
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        if check and "Traceback" in err:
            raise TestFailure("origin crashed:\n" + err)

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.stop(check=et is None)
        return False


def free_port():
    """A TCP port on 127.0.0.1 free just now (for a listener whose port a
    configuration must name before it starts)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class CacheTests:
    """The http-cache-tests suite (npm package; .ci/run installs it and
    sets CISTERN_CACHE_TESTS to its folder): its origin server on a free
    port, and its command-line client.

        with CacheTests() as ct:      # SkipTest without the package
            ... remap to ct.port; ct.run(cistern_port, "test-id") -> stdout;
            ct.run(cistern_port) -> {id: True or [kind of failure, message]}

    Teardown stops the server."""

    def __init__(self):
        self.dir = os.environ.get("CISTERN_CACHE_TESTS", "")
        if not self.dir or not os.path.isfile(os.path.join(self.dir, "cli.mjs")):
            raise SkipTest("CISTERN_CACHE_TESTS (http-cache-tests' folder) not set")
        self.port = free_port()
        env = dict(os.environ, npm_config_port=str(self.port), npm_config_protocol="http",
                   npm_config_pidfile=os.devnull)
        self.proc = subprocess.Popen(["node", "server/server.mjs"], cwd=self.dir, env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._up, 10, what="the cache-tests server")

    def _up(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
            return True
        except OSError:
            return False

    def run(self, port, tid="", timeout=60):
        """The client against http://127.0.0.1:port: one test's output
        (text), or with no tid the whole suite's results (parsed)."""
        e = dict(os.environ, npm_config_base="http://127.0.0.1:%d" % port,
                 npm_config_id=tid, npm_package_config_id=tid)
        out = subprocess.run(["node", "--no-warnings", "cli.mjs"], cwd=self.dir, env=e,
                             capture_output=True, text=True, timeout=timeout).stdout
        return out if tid else json.loads(out)

    def tests(self):
        """{id: kind} of every test the client runs against a proxy (not
        the browser-only ones); kind "required" when the suite gives none."""
        js = ("import t from './tests/index.mjs';"
              "import s from './tests/surrogate-control.mjs'; t.push(s);"
              "console.log(JSON.stringify(t.flatMap(x => x.tests"
              ".filter(y => !y.browser_only).map(y => [y.id, y.kind || 'required']))))")
        out = subprocess.run(["node", "--no-warnings", "--input-type=module", "-e", js],
                             cwd=self.dir, capture_output=True, text=True, timeout=60).stdout
        return dict(json.loads(out))

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        self.proc.terminate()
        self.proc.wait(10)
        return False


def header_of(req, name):
    """The first value of header name in an origin request record."""
    for k, v in req["headers"]:
        if k.lower() == name.lower():
            return v
    return None


# ---------------------------------------------------------------------------
# Cache checks shared by the suites

def is_hit(r):
    """Did Cistern answer r from its cache (RFC 9211 Cache-Status)?"""
    return re.search(r"cistern; hit\b", r.header("Cache-Status", "")) is not None


def expect_body(got, want, what="body"):
    """Compare bodies; on a mismatch say where, not what (bodies are big)."""
    if got == want:
        return
    i = next((k for k in range(min(len(got), len(want)))
              if got[k] != want[k]), min(len(got), len(want)))
    fail("%s: %d bytes, want %d; first difference at offset %d "
         "(got %r, want %r)" % (what, len(got), len(want), i,
                                got[i:i + 16], want[i:i + 16]))


def cache_stats(port):
    """The daemon's global counters from /_stats, the numeric ones."""
    r = one_request(port, "GET", "/_stats")
    expect(r is not None and r.status == 200, "/_stats: %r"
           % (r and r.status))
    g = json.loads(r.body.decode())["global"]
    return {k: int(v) for k, v in g.items() if str(v).isdigit()}


# ---------------------------------------------------------------------------
# Raw sockets and a minimal response parser

def one_request(port, method, path, body=None, headers=(), host="localhost",
                src=None, timeout=20.0, close_delimited_ok=True):
    """One request on a new connection (Connection: close), optionally from
    source address src.  Returns the parsed Response, or None when no
    complete response came back: nothing parsable, a body shorter or longer
    than its Content-Length, or (close_delimited_ok=False) a body ended only
    by the close, where truncation cannot be told."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        if src:
            s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        h = ["%s %s HTTP/1.1" % (method, path), "Host: %s" % host,
             "Connection: close"]
        h += ["%s: %s" % kv for kv in headers]
        if body is not None:
            h.append("Content-Length: %d" % len(body))
        s.sendall(("\r\n".join(h) + "\r\n\r\n").encode("latin-1")
                  + (body or b""))
        data = b""
        while True:
            try:
                d = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not d:
                break
            data += d
    finally:
        s.close()
    rs, used, err = _parse(data, [method], True)
    if err or not rs:
        return None
    r = rs[0]
    bodyless = method == "HEAD" or r.status in (204, 304)
    cl = r.header("Content-Length")
    if cl is not None and not bodyless and int(cl) != len(r.body):
        return None
    if not close_delimited_ok and r.chunked is False and cl is None and not bodyless:
        return None
    return r


def raw(port, data, timeout=5.0, read_until_close=True, host="127.0.0.1",
        shut_wr=False):
    """Connect, send data (bytes, or a list of bytes sent one send() each),
    and return (received bytes, closed).  With read_until_close, read until
    the peer closes (closed=True) or nothing arrives for `timeout` seconds
    (closed=False).  Otherwise return after the first read (bytes, EOF or
    timeout); use Conn for finer control.  A reset counts as closed."""
    c = Conn(port, host=host, timeout=timeout)
    try:
        for piece in (data if isinstance(data, list) else [data]):
            c.send(piece)
        if shut_wr:
            c.sock.shutdown(socket.SHUT_WR)
        if read_until_close:
            closed = c.read_until_close(timeout)
        else:
            closed = c._recv_some(timeout) is None
        return c.buf, closed
    finally:
        c.close()


class Conn:
    """A raw client connection with a receive buffer.

        c = Conn(port)
        c.send(b"GET / HTTP/1.1\\r\\nHost: a\\r\\n\\r\\n")
        r = c.response()                     # one parsed Response
        rs = c.responses(3, methods=[...])   # several, pipelined
        c.closed_within(2.0)                 # True once the peer closed
        c.open_after(0.5)                    # True if still open after 0.5 s
    """

    def __init__(self, port, host="127.0.0.1", timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self.buf = b""
        self.pos = 0           # bytes of buf already parsed into responses
        self.eof = False
        self.reset = False

    def send(self, data):
        self.sock.sendall(data)

    def _recv_some(self, timeout):
        """Receive once; returns bytes, None on EOF/reset, b"" on timeout."""
        if self.eof:
            return None
        self.sock.settimeout(max(timeout, 0.001))
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            return b""
        except ConnectionResetError:
            self.eof = self.reset = True
            return None
        if not d:
            self.eof = True
            return None
        self.buf += d
        return d

    def read_until_close(self, timeout=None):
        """Read until EOF; True if the peer closed within timeout seconds
        (counted from the last byte received), False on timeout."""
        timeout = self.timeout if timeout is None else timeout
        while True:
            d = self._recv_some(timeout)
            if d is None:
                return True
            if d == b"":
                return False

    def closed_within(self, timeout):
        """True if the peer closes within timeout seconds (total); any bytes
        received meanwhile are buffered."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._recv_some(left) is None:
                return True

    def open_after(self, seconds):
        """True if the peer has not closed after `seconds`."""
        return not self.closed_within(seconds)

    def responses(self, n, methods=None, timeout=None):
        """Read until n more complete responses are buffered; return them.
        methods: the request method of each of these n responses (HEAD
        responses have no body).  Fails on timeout or early close."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            rs, used, err = _parse(self.buf[self.pos:], methods, self.eof)
            if err:
                raise TestFailure("bad response bytes: %s; received %r"
                                  % (err, _short(self.buf[self.pos:])))
            if len(rs) >= n:
                self.pos += sum(len(r.raw) for r in rs[:n])
                return rs[:n]
            if self.eof:
                raise TestFailure(
                    "connection closed after %d of %d responses; received "
                    "%r" % (len(rs), n, _short(self.buf[self.pos:])))
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestFailure("timed out waiting for %d responses (got "
                                  "%d); received %r" % (
                                      n, len(rs), _short(self.buf[self.pos:])))
            self._recv_some(left)

    def response(self, method="GET", timeout=None):
        return self.responses(1, [method], timeout)[0]

    def request(self, data, method="GET", timeout=None):
        """Send data and return the one response to it."""
        self.send(data)
        return self.response(method, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False


class Response:
    """A parsed HTTP response.  headers: list of (name, value) in order."""

    def __init__(self):
        self.version = self.reason = ""
        self.status = 0
        self.headers = []
        self.body = b""
        self.trailers = []
        self.chunked = False
        self.interim = []       # 1xx responses that preceded this one
        self.raw = b""

    def header(self, name, default=None):
        """First value of header name (case-insensitive), or default."""
        n = name.lower()
        for k, v in self.headers:
            if k.lower() == n:
                return v
        return default

    def header_all(self, name):
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def has_token(self, name, token):
        """True if a comma-separated header contains token (any case)."""
        return any(token.lower() == t.strip().lower()
                   for v in self.header_all(name) for t in v.split(","))

    def __repr__(self):
        return "<Response %d %s headers=%r body=%r>" % (
            self.status, self.reason, self.headers, _short(self.body, 200))


def _parse(data, methods=None, eof=True):
    """Parse as many complete responses from data as possible.
    Returns (responses, bytes consumed, error or None).  A close-delimited
    body completes only when eof is true."""
    out = []
    pos = 0
    interim = []
    idx = 0
    while pos < len(data):
        he = data.find(b"\r\n\r\n", pos)
        if he < 0:
            if not data.startswith(b"HTTP/"[:len(data) - pos], pos):
                return out, pos, "does not start with HTTP/: %r" % data[pos:
                                                                       pos + 60]
            break
        head = data[pos:he].decode("latin-1")
        lines = head.split("\r\n")
        m = re.match(r"^(HTTP/\d\.\d) (\d{3})(?: (.*))?$", lines[0])
        if not m:
            return out, pos, "bad status line %r" % lines[0]
        r = Response()
        r.version, r.status, r.reason = m.group(1), int(m.group(2)), \
            m.group(3) or ""
        for ln in lines[1:]:
            if ":" not in ln:
                return out, pos, "bad header line %r" % ln
            k, v = ln.split(":", 1)
            r.headers.append((k, v.strip(" \t")))
        bstart = he + 4
        method = (methods[idx] if methods and idx < len(methods) else "GET")
        if 100 <= r.status < 200:
            r.raw = data[pos:bstart]
            interim.append(r)
            pos = bstart
            continue
        te = r.header("Transfer-Encoding")
        cl = r.header("Content-Length")
        if method.upper() == "HEAD" or r.status in (204, 304):
            end = bstart
        elif te is not None and "chunked" in te.lower():
            r.chunked = True
            end, body, trailers, err = _dechunk(data, bstart)
            if err:
                return out, pos, err
            if end is None:
                break
            r.body, r.trailers = body, trailers
        elif cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return out, pos, "bad Content-Length %r" % cl
            if len(data) - bstart < n:
                break
            end = bstart + n
            r.body = data[bstart:end]
        else:
            if not eof:
                break
            end = len(data)
            r.body = data[bstart:]
        r.raw = data[pos:end]
        r.interim, interim = interim, []
        out.append(r)
        idx += 1
        pos = end
    return out, pos, None


def _dechunk(data, pos):
    """(end, body, trailers, error); end None when incomplete."""
    body = b""
    while True:
        le = data.find(b"\r\n", pos)
        if le < 0:
            return None, None, None, None
        size_s = data[pos:le].split(b";", 1)[0].strip()
        try:
            size = int(size_s, 16)
        except ValueError:
            return None, None, None, "bad chunk size %r" % data[pos:le]
        pos = le + 2
        if size == 0:
            trailers = []
            while True:
                le = data.find(b"\r\n", pos)
                if le < 0:
                    return None, None, None, None
                line = data[pos:le]
                pos = le + 2
                if not line:
                    return pos, body, trailers, None
                trailers.append(line.decode("latin-1"))
        if len(data) < pos + size + 2:
            return None, None, None, None
        body += data[pos:pos + size]
        if data[pos + size:pos + size + 2] != b"\r\n":
            return None, None, None, "chunk data not followed by CRLF"
        pos += size + 2


def parse_responses(data, head_methods=None, methods=None, eof=True,
                    strict=True):
    """Parse every response in data (a raw reply, possibly several
    pipelined responses).  methods (alias head_methods): the method of each
    request in order, so HEAD responses are read without a body.  With
    strict, bytes left over that are not a complete response fail."""
    ms = methods if methods is not None else head_methods
    rs, used, err = _parse(data, ms, eof)
    if err:
        raise TestFailure("unparsable response bytes: %s; data %r"
                          % (err, _short(data)))
    if strict and used != len(data):
        raise TestFailure("incomplete or extra response bytes: %r"
                          % _short(data[used:]))
    return rs


def status_of(data):
    """The status code of the first response in raw bytes, or None."""
    m = re.match(rb"HTTP/\d\.\d (\d{3})", data)
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------------------
# curl and ab

class CurlResult:
    def __init__(self):
        self.rc = 0
        self.status = None
        self.headers = []       # of the last response
        self.all_heads = []     # every header block (1xx, redirects)
        self.body = b""
        self.stderr = ""

    def header(self, name, default=None):
        n = name.lower()
        for k, v in self.headers:
            if k.lower() == n:
                return v
        return default

    def __repr__(self):
        return "<CurlResult rc=%d status=%s headers=%r body=%r>" % (
            self.rc, self.status, self.headers, _short(self.body, 200))


def curl(args, timeout=30.0):
    """Run curl -sS with args (a list or a shell-like string); returns a
    CurlResult (status and headers of the last response, body bytes, rc,
    stderr).  A non-zero rc is not an error here: check .rc."""
    if isinstance(args, str):
        args = shlex.split(args)
    d = tempfile.mkdtemp(prefix="cistern-curl-")
    try:
        hp, bp = os.path.join(d, "h"), os.path.join(d, "b")
        p = subprocess.run(["curl", "-sS", "--max-time", str(timeout),
                            "-D", hp, "-o", bp] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout + 10)
        r = CurlResult()
        r.rc = p.returncode
        r.stderr = p.stderr.decode("utf-8", "replace")
        hdr = _read(hp)
        try:
            with open(bp, "rb") as f:
                r.body = f.read()
        except FileNotFoundError:
            pass
        for block in re.split(r"\r?\n\r?\n", hdr):
            lines = [x for x in re.split(r"\r?\n", block) if x]
            if not lines or not lines[0].startswith("HTTP/"):
                continue
            hs = []
            for ln in lines[1:]:
                if ":" in ln:
                    k, v = ln.split(":", 1)
                    hs.append((k, v.strip()))
            st = int(lines[0].split()[1])
            r.all_heads.append((st, hs))
        if r.all_heads:
            r.status, r.headers = r.all_heads[-1]
        return r
    finally:
        shutil.rmtree(d, ignore_errors=True)


class AbResult:
    def __init__(self):
        self.rc = 0
        self.complete = None
        self.failed = None
        self.non2xx = 0
        self.rps = None
        self.keepalive = None
        self.output = ""

    def __repr__(self):
        return ("<AbResult rc=%d complete=%s failed=%s non2xx=%s rps=%s>"
                % (self.rc, self.complete, self.failed, self.non2xx,
                   self.rps))


def ab(args, timeout=300.0):
    """Run ab with args (list or string); parse Complete requests, Failed
    requests, Non-2xx responses (0 when absent), Requests per second and
    Keep-Alive requests."""
    if isinstance(args, str):
        args = shlex.split(args)
    p = subprocess.run(["ab", "-q"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    r = AbResult()
    r.rc = p.returncode
    r.output = (p.stdout + p.stderr).decode("utf-8", "replace")

    def grab(rx, conv=int):
        m = re.search(rx, r.output, re.M)
        return conv(m.group(1)) if m else None
    r.complete = grab(r"^Complete requests:\s+(\d+)")
    r.failed = grab(r"^Failed requests:\s+(\d+)")
    r.non2xx = grab(r"^Non-2xx responses:\s+(\d+)") or 0
    r.keepalive = grab(r"^Keep-Alive requests:\s+(\d+)")
    r.rps = grab(r"^Requests per second:\s+([\d.]+)", float)
    return r


# ---------------------------------------------------------------------------
# The runner

class _Timeout(BaseException):
    pass


def timeout(seconds):
    """Decorator: give a test more (or less) than the default 120 s."""
    def deco(fn):
        fn.timeout = seconds
        return fn
    return deco


def _alarm(signum, frame):
    raise _Timeout()


def _with_notes(e):
    return str(e) + "".join("\n" + n for n in getattr(e, "__notes__", []))


def _indent(text, first=False):
    out = text.replace("\n", "\n    ")
    return ("    " + out) if first else out


def main(module=None):
    """Run the test_* functions of the calling module (in source order),
    or only those named on the command line.  Prints PASS/FAIL/SKIP lines;
    exits 0 (all passed), 1 (a failure), 77 (all skipped), 99 (harness
    error: unknown test name, import trouble)."""
    if module is None:
        module = sys.modules["__main__"]
    tests = [(n, f) for n, f in vars(module).items()
             if n.startswith("test_") and callable(f)
             and getattr(f, "__module__", None) == module.__name__]
    tests.sort(key=lambda nf: nf[1].__code__.co_firstlineno)
    names = sys.argv[1:]
    if names:
        known = dict(tests)
        missing = [n for n in names if n not in known]
        if missing:
            print("no such test: %s" % ", ".join(missing))
            sys.exit(99)
        tests = [(n, known[n]) for n in names]
    b = cistern_bin()
    if not os.access(b, os.X_OK) and not getattr(module, "NO_DAEMON", False):
        print("SKIP all: no daemon binary at %s (set CISTERN_BIN)" % b)
        sys.exit(77)
    signal.signal(signal.SIGALRM, _alarm)
    npass = nfail = nskip = 0
    for name, fn in tests:
        t0 = time.monotonic()
        sys.stdout.flush()
        signal.alarm(int(getattr(fn, "timeout", 120)))
        try:
            fn()
            signal.alarm(0)
            npass += 1
            print("PASS %s (%.1fs)" % (name, time.monotonic() - t0))
        except SkipTest as e:
            signal.alarm(0)
            nskip += 1
            print("SKIP %s: %s" % (name, e))
        except _Timeout as e:
            nfail += 1
            print("FAIL %s: test timed out after %ss%s" % (
                name, getattr(fn, "timeout", 120),
                _indent("".join("\n" + n for n in
                                getattr(e, "__notes__", [])))))
        except (AssertionError, HarnessError) as e:
            signal.alarm(0)
            nfail += 1
            print("FAIL %s: %s" % (name, _indent(_with_notes(e))))
        except Exception as e:  # noqa: BLE001
            signal.alarm(0)
            nfail += 1
            tb = traceback.format_exc().rstrip()
            print("FAIL %s: %s: %s\n%s" % (name, type(e).__name__,
                                           _indent(_with_notes(e)),
                                           _indent(tb, True)))
        sys.stdout.flush()
    print("# %d passed, %d failed, %d skipped" % (npass, nfail, nskip))
    if nfail:
        sys.exit(1)
    if npass == 0 and nskip:
        sys.exit(77)
    sys.exit(0)
