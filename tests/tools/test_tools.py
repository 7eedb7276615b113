#!/usr/bin/env python3
"""tests/tools/test_tools.py - every installed program keeps the tools'
one command-line convention (tools/cli.h, issue 23 items 8 and 9):

  --help        exit 0, usage on stdout, every flag of its table listed
  --version     exit 0, "PROG VERSION" (meson's project version)
  unknown flag, missing or bad value: exit 2, exactly one line on stderr
  xfer-bench    no default that runs everything: no argument exits 2
  OS errors     keep their reason (xferd on a port in use, a trace file or
                control socket that cannot be opened)
  xfer-trace stuck --live against a gone or silent process ends in one
                line (every run here has a timeout, so a hang fails)

The installed programs come from meson's intro-installed.json, so a new
tool that is installed without an entry here fails the test.  The flag
tables are read from the tools' sources (the rows of `cli_flag X[]`).

Usage: test_tools.py BUILD_ROOT SOURCE_ROOT VERSION
"""
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD, SRC, VERSION = sys.argv[1:4]
RUN_TIMEOUT = 30  # seconds; every run has one, so a hang fails the test

# program -> its sources (where its flag tables are) and one bad value.
TOOLS = {
    "xferd": (["tools/xferd/xferd.c"], ["--port", "x"]),
    "xfer-trace": (["tools/trace/*.c"], ["stuck", "--older-than", "x",
                                          "f.trace"]),
    "xfer-check": (["tools/check/main.c"], ["--shards", "0"]),
    "xfer-bench": (["tools/bench.c"], ["nosuch"]),
    "xfer-demo": (["tools/demo.c"], ["--transfers", "x"]),
    "xfer-bench-tcp": (["tools/bench/bench_tcp.c"], ["--runs", "0"]),
    "xfer-bench-rdma": (["tools/bench/bench_rdma.c"], ["--size", "x"]),
    "xfer-bench-stream": (["tools/bench/bench_stream.c"], ["--rounds", "0"]),
    "xfer-bench-scale": (["tools/bench/bench_scale.c"], ["surplus"]),
}


def installed():
    """name -> build path of every program meson installs in a bin or
    libexec folder."""
    with open(os.path.join(BUILD, "meson-info", "intro-installed.json")) as f:
        inst = json.load(f)
    return {os.path.basename(dst): src for src, dst in inst.items()
            if re.search(r"/(s?bin|libexec)/", dst)}


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True,
                          timeout=kw.pop("timeout", RUN_TIMEOUT), **kw)


def tables(name):
    """[(prog words after the program, [long flags])] of every cli table
    in the tool's sources: `static const cli X = {.prog = "P", ...
    .flags = T}` with T's rows."""
    text = ""
    for pat in TOOLS[name][0]:
        for path in sorted(glob.glob(os.path.join(SRC, pat))):
            with open(path) as f:
                text += f.read()
    rows = {}
    for m in re.finditer(r"static const cli_flag (\w+)\[\] = \{(.*?)"
                         r"\{NULL, 0, NULL, NULL, 0\}\}", text, re.S):
        flags = re.findall(r'\{"([a-z0-9-]+)",', m.group(2))
        flags += ["help"] if "CLI_HELP" in m.group(2) else []
        flags += ["version"] if "CLI_VERSION" in m.group(2) else []
        rows[m.group(1)] = flags
    out = []
    for m in re.finditer(r"static const cli \w+ = \{(.*?)\};", text, re.S):
        prog = re.search(r'\.prog = "([^"]+)"', m.group(1)).group(1)
        table = re.search(r"\.flags = (\w+)", m.group(1)).group(1)
        out.append((prog.split()[1:], rows[table]))
    return out


def one_line(test, r, code=2):
    test.assertEqual(r.returncode, code, r.stderr)
    test.assertEqual(r.stdout, "", "an error prints nothing on stdout")
    lines = r.stderr.splitlines()
    test.assertEqual(len(lines), 1, "exactly one line on stderr: %r"
                     % r.stderr)
    return lines[0]


class Convention(unittest.TestCase):
    def setUp(self):
        self.progs = installed()

    def test_tools_every_installed_program_is_covered(self):
        self.assertTrue(self.progs, "intro-installed.json lists no program")
        for name in self.progs:
            self.assertIn(name, TOOLS, "installed program %s is not under "
                          "this test's convention" % name)

    def test_tools_help_lists_every_flag_of_the_table(self):
        for name, exe in self.progs.items():
            tabs = tables(name)
            self.assertTrue(tabs, "%s: no cli table in its sources" % name)
            for words, flags in tabs:
                with self.subTest(prog=[name] + words):
                    r = run([exe] + words + ["--help"])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertIn("usage: %s" % " ".join([name] + words),
                                  r.stdout)
                    for fl in flags:
                        self.assertRegex(r.stdout, r"--%s\b" % re.escape(fl),
                                         "%s --help lacks --%s" % (name, fl))
                    self.assertIn("help", flags)
                    # -h is the same
                    self.assertEqual(run([exe] + words + ["-h"]).stdout,
                                     r.stdout)

    def test_tools_version(self):
        for name, exe in self.progs.items():
            with self.subTest(prog=name):
                r = run([exe, "--version"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stdout, "%s %s\n" % (name, VERSION))

    def test_tools_unknown_flag_is_one_line_exit_2(self):
        for name, exe in self.progs.items():
            for bad in (["--no-such-flag"], ["-Z"]):
                with self.subTest(prog=name, arg=bad):
                    line = one_line(self, run([exe] + bad))
                    self.assertIn(name, line)
                    self.assertIn(bad[0], line)

    def test_tools_bad_value_is_one_line_exit_2(self):
        for name, exe in self.progs.items():
            args = TOOLS[name][1]
            with self.subTest(prog=name, args=args):
                line = one_line(self, run([exe] + args))
                self.assertIn(name, line)

    def test_tools_missing_value_is_one_line_exit_2(self):
        for name, exe in self.progs.items():
            flag = TOOLS[name][1]
            flag = flag[1] if name in ("xfer-trace",) else flag[0]
            args = (["stuck"] if name == "xfer-trace" else []) + [flag]
            if name == "xfer-bench":
                continue  # its bad value is a benchmark's name, no flag
            with self.subTest(prog=name, args=args):
                line = one_line(self, run([exe] + args))
                self.assertIn(flag, line)

    def test_tools_bench_has_no_default(self):
        line = one_line(self, run([self.progs["xfer-bench"]]))
        self.assertIn("usage", line)


class Helpers(unittest.TestCase):
    """`xfer-bench tcp|rdma|check` find their programs next to the running
    executable (an install puts them all in bindir), not only in the build
    tree's folders."""

    def test_tools_bench_finds_its_programs_next_to_it(self):
        exe = installed()["xfer-bench"]
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(exe, os.path.join(d, "xfer-bench"))
            for prog in ("xfer-bench-tcp", "xfer-bench-rdma", "xfer-check"):
                with open(os.path.join(d, prog), "w") as f:
                    f.write("#!/bin/sh\necho %s \"$@\"\n" % prog)
                os.chmod(os.path.join(d, prog), 0o755)
            for what, want in (("tcp", "xfer-bench-tcp --smoke"),
                               ("rdma", "xfer-bench-rdma --smoke"),
                               ("check", "xfer-check --bench --smoke")):
                with self.subTest(what=what):
                    r = run([os.path.join(d, "xfer-bench"), what, "--smoke"])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(r.stdout.strip(), want)


class OsErrors(unittest.TestCase):
    """An OS error keeps its reason (errno's message), not "transport i/o
    error"."""

    def setUp(self):
        self.xferd = installed()["xferd"]

    def test_tools_xferd_port_in_use_says_why(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        try:
            r = run([self.xferd, "--port", str(port), "--pool", "1M"])
        finally:
            s.close()
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("bind 127.0.0.1:%d: Address already in use" % port,
                      r.stderr)
        self.assertNotIn("transport i/o error", r.stderr)

    def test_tools_xferd_trace_file_says_which_and_why(self):
        path = "/nonexistent-xfer-dir/t.trace"
        r = run([self.xferd, "--port", "0", "--pool", "1M", "--trace", path])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("%s: No such file or directory" % path, r.stderr)

    def test_tools_xferd_ctl_socket_says_why(self):
        path = "/nonexistent-xfer-dir/ctl.sock"
        r = run([self.xferd, "--port", "0", "--pool", "1M", "--ctl", path])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("%s: No such file or directory" % path, r.stderr)


class StuckLive(unittest.TestCase):
    """xfer-trace stuck --live against a process that is gone or does not
    answer ends in one line (exit 3); the harness's timeout turns a hang
    into a failure."""

    def setUp(self):
        self.trace = installed()["xfer-trace"]
        self.dir = tempfile.mkdtemp(prefix="xfer-stuck-")
        self.path = os.path.join(self.dir, "ctl.sock")
        self.socks = []

    def tearDown(self):
        for s in self.socks:
            s.close()
        shutil.rmtree(self.dir)

    def listener(self, backlog=1):
        s = socket.socket(socket.AF_UNIX)
        s.bind(self.path)
        s.listen(backlog)
        self.socks.append(s)
        return s

    def stuck(self, *extra):
        return run([self.trace, "stuck", "--live", self.path] + list(extra),
                   timeout=20)

    def test_tools_stuck_live_dead_socket(self):
        s = socket.socket(socket.AF_UNIX)
        s.bind(self.path)  # the file stays, nothing listens: a gone xferd
        s.close()
        line = one_line(self, self.stuck(), code=3)
        self.assertIn(self.path, line)
        self.assertIn("Connection refused", line)

    def test_tools_stuck_live_silent_listener(self):
        self.listener()  # accepted by the kernel, never answered
        line = one_line(self, self.stuck("--timeout", "500ms"), code=3)
        self.assertIn(self.path, line)
        self.assertIn("within", line)

    def test_tools_stuck_live_full_backlog(self):
        self.listener(backlog=0)  # a stopped process: connect() would block
        for _ in range(8):
            c = socket.socket(socket.AF_UNIX)
            c.setblocking(False)
            self.socks.append(c)
            try:
                c.connect(self.path)
            except BlockingIOError:
                break
        line = one_line(self, self.stuck("--timeout", "500ms"), code=3)
        self.assertIn("within", line)

    def test_tools_stuck_live_trickling_listener(self):
        # Answers a byte at a time, never the whole snapshot: the deadline
        # (the default 5 s) is over the whole read, not per byte (84f8aad
        # waited 5 s per byte, so for ever).
        lis = self.listener()
        stop = threading.Event()

        def serve():
            conn, _ = lis.accept()
            self.socks.append(conn)
            while not stop.wait(0.2):
                try:
                    conn.send(b"{")
                except OSError:
                    return
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            line = one_line(self, self.stuck(), code=3)
        finally:
            stop.set()
        self.assertIn("within 5s", line)

    def test_tools_stuck_live_bad_timeout(self):
        self.listener()
        one_line(self, self.stuck("--timeout", "0"), code=2)


class MembersBounded(unittest.TestCase):
    """xfer-trace members (issue 28) keeps stuck --live's rules: a gone or
    silent process, a ctl without a directory and an etcd that does not
    answer each end in one line (exit 3) within --timeout; bad usage is
    one line (exit 2)."""

    setUp = StuckLive.setUp
    tearDown = StuckLive.tearDown
    listener = StuckLive.listener

    def members(self, *args):
        return run([self.trace, "members"] + list(args), timeout=20)

    def test_tools_members_silent_listener(self):
        self.listener()
        line = one_line(self, self.members("--ctl", self.path, "--timeout",
                                           "500ms"), code=3)
        self.assertIn("within", line)

    def test_tools_members_no_directory(self):
        lis = self.listener()

        def serve():
            conn, _ = lis.accept()
            conn.sendall(b'{"xfer_ctl":1}\n{"kind":"end","transfers":0,'
                         b'"reservations":0}\n')
            conn.close()
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        line = one_line(self, self.members("--ctl", self.path), code=3)
        t.join()
        self.assertIn("no directory", line)

    def test_tools_members_etcd_unreachable(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))  # a port nothing listens on
        port = s.getsockname()[1]
        s.close()
        line = one_line(self, self.members(
            "--etcd", "http://127.0.0.1:%d" % port, "--group", "g",
            "--timeout", "500ms"), code=3)
        self.assertIn("did not answer within", line)

    def test_tools_members_usage(self):
        one_line(self, self.members(), code=2)
        one_line(self, self.members("--etcd", "http://127.0.0.1:1"), code=2)
        one_line(self, self.members("--ctl", self.path, "--etcd",
                                    "http://127.0.0.1:1"), code=2)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
