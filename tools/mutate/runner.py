"""tools/mutate/runner.py - build one mutant in a scratch tree and run both nets.

A Worker owns one scratch copy of the repository (SCRATCH/wN/src) and one
meson build directory for it (SCRATCH/wN/build), configured once and then
built incrementally: each mutant is written into the scratch copy, the
targets the two nets need are rebuilt with ninja, the nets run, and the
original file is written back (the next build recompiles it).  The
repository the harness was started from is only ever read.

The two nets come from `meson introspect --tests` of the scratch build, so
they follow tests/meson.build as it changes:

  unit     the tests of suites unit and fault, in meson's order;
  checker  the exit-0 xfer-check runs of suite model (expect_exit.sh 0 ...,
           not --replay, not the mutant_ tests), cheapest first by the
           baseline time of this run.

Each test runs as meson would run it (its command, its environment, the
build directory as working directory), in its own process group, under
meson's timeout (or a multiple of its baseline time) and an address-space
limit.  A net stops at its first failing test
unless all_tests is set.  What must stay true: the unmutated tree passes
both nets (the baseline) before any mutant is judged, and every file a
mutant touched is restored whatever happens.
"""

import json
import os
import re
import resource
import shutil
import signal
import subprocess
import time

import coverage
import nets
from operators import read_text

UNIT_SUITES = ('unit', 'fault')
CHECKER_SUITE = 'model'
MIN_TIMEOUT_S = 30.0
OUTPUT_KEEP = 64 * 1024


class Outcome:
    """What one net said about one tree: passed, or which test failed."""

    def __init__(self, verdict, test='', detail='', secs=0.0):
        # 'pass', 'killed', 'timeout', or 'nocov': no test of the net
        # executed the mutated line on the clean tree (coverage.py), so
        # nothing ran; it got through, and the cell says why.
        self.verdict = verdict
        self.test, self.detail, self.secs = test, detail, secs
        self.others = []  # later failures, when every test ran
        self.tail = ''    # the end of the first failing test's output

    def cell(self):
        if self.verdict in ('pass', 'nocov'):
            return self.verdict
        s = '%s:%s' % (self.verdict, self.test)
        s += ':' + self.detail if self.detail else ''
        return ','.join([s] + self.others)

    @property
    def caught(self):
        return self.verdict in ('killed', 'timeout')


def repo_files(root):
    out = subprocess.run(
        ['git', '-C', root, 'ls-files', '-z', '--cached', '--others',
         '--exclude-standard'], check=True, capture_output=True).stdout
    files = [f for f in out.decode().split('\0') if f]
    return sorted(f for f in files if os.path.isfile(os.path.join(root, f)))


def same_content(a, b):
    try:
        if os.path.getsize(a) != os.path.getsize(b):
            return False
        with open(a, 'rb') as fa, open(b, 'rb') as fb:
            return fa.read() == fb.read()
    except OSError:
        return False


def limit_memory(mb):
    """Cap the data (heap and private writable mappings) of this process
    and so of everything it starts (set once, before any thread:
    preexec_fn is not thread-safe).  RLIMIT_DATA, not RLIMIT_AS: etcd maps
    its whole 10 GiB backend at start (a shared file mapping, not data),
    and under an address-space cap of 4 GiB every test that starts it
    failed on the clean tree and left the nets of transport/dir*.c."""
    if mb:
        b = mb * 1024 * 1024
        hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
        if hard != resource.RLIM_INFINITY:
            b = min(b, hard)
        resource.setrlimit(resource.RLIMIT_DATA, (b, hard))


def kill_session(sid):
    """SIGKILL every process of session sid.  A test's own process group
    is not enough: Check's fork mode puts each test's child in a group of
    its own (setpgid), so a mutant that made it spin outlived killpg, held
    the output pipe open and stalled a worker for good (seen twice in
    issue 30's run, on test_tcp).  The session survives setpgid."""
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % d) as f:
                st = f.read()
            # pid (comm) state ppid pgrp session ...: after the last ')'
            if int(st[st.rindex(')') + 2:].split()[3]) == sid:
                os.kill(int(d), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass


def run_limited(cmd, cwd, env, timeout):
    """(returncode or None on timeout, output, seconds)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        kill_session(p.pid)
        try:
            out, _ = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            out = b''  # a straggler outside the session keeps the pipe
        rc = None
    kill_session(p.pid)  # stragglers a test left behind
    return rc, out.decode(errors='replace'), time.monotonic() - t0


CHECK_FAIL_RE = re.compile(r'^[^:\s]+:\d+:([FE]):[^:]*:(\w+):\d+:', re.M)
VIOLATION_RE = re.compile(r'VIOLATION (\w+) \(')
EXIT_RE = re.compile(r'FAIL: exit (\d+)')


def unit_detail(text):
    m = CHECK_FAIL_RE.search(text)
    if m:
        return m.group(2) + ('' if m.group(1) == 'F' else '(error)')
    return ''


def checker_detail(text):
    m = VIOLATION_RE.search(text)
    if m:
        return m.group(1)
    if 'did not finish its space' in text:
        return 'not-exhaustive'
    if re.search(r'Assertion .* failed', text):
        return 'assert'
    m = EXIT_RE.search(text)
    if m:
        rc = int(m.group(1))
        return 'signal%d' % (rc - 128) if rc > 128 else 'exit%d' % rc
    return ''


class Test:
    def __init__(self, spec):
        self.name = spec['name']
        self.cmd = spec['cmd']
        self.env = spec.get('env') or {}
        self.workdir = spec.get('workdir')
        self.meson_timeout = float(spec.get('timeout') or 0) or 600.0
        self.depends = spec.get('depends') or []
        self.baseline = None

    def timeout(self, factor):
        """meson's timeout (what CI allows), or `factor` times this test's
        baseline time (at least MIN_TIMEOUT_S) when that is shorter."""
        if factor is None or self.baseline is None:
            return self.meson_timeout
        return min(self.meson_timeout,
                   max(MIN_TIMEOUT_S, factor * self.baseline))


def suites_of(spec):
    return {s.split(':')[-1] for s in spec.get('suite', [])}


def is_checker_run(spec):
    cmd = spec['cmd']
    return (CHECKER_SUITE in suites_of(spec) and len(cmd) > 2 and
            os.path.basename(cmd[0]) == 'expect_exit.sh' and cmd[1] == '0' and
            '--replay' not in cmd and not spec['name'].startswith('mutant_'))


class Worker:
    def __init__(self, root, scratch, index, opts):
        self.root = root
        self.dir = os.path.join(scratch, 'w%d' % index)
        self.src = os.path.join(self.dir, 'src')
        self.build = os.path.join(self.dir, 'build')
        self.opts = opts
        self.unit, self.checker = [], []
        self.targets = []
        # transport/: the tests of every suite some selected file needs
        # (nets.FILE_NETS), cheapest first after the baseline.
        self.suites = {}
        self.test_targets = {}
        # coverage.Map when selecting tests by coverage (--select-by-coverage)
        self.cov = None
        self.selection = []  # (mutant id, net, mode, tests run / in net)

    # -- the scratch tree --------------------------------------------------
    def sync(self):
        """Make the scratch source an exact copy of the repository's files,
        rewriting only what differs so the build stays incremental."""
        files = repo_files(self.root)
        os.makedirs(self.src, exist_ok=True)
        keep = set(files)
        for f in files:
            a, b = os.path.join(self.root, f), os.path.join(self.src, f)
            if not same_content(a, b):
                os.makedirs(os.path.dirname(b), exist_ok=True)
                # A fresh mtime, not the source's (copy2): a file edited
                # before the scratch build last ran would look older than
                # its object, and ninja would keep the stale one.
                shutil.copyfile(a, b)
                shutil.copymode(a, b)
        for dirpath, dirnames, filenames in os.walk(self.src):
            for fn in filenames:
                rel = os.path.relpath(os.path.join(dirpath, fn), self.src)
                if rel not in keep:
                    os.unlink(os.path.join(dirpath, fn))

    def setup(self, log):
        if not os.path.exists(os.path.join(self.build, 'build.ninja')):
            log('configuring %s' % self.build)
            subprocess.run(['meson', 'setup', self.build, self.src],
                           check=True, capture_output=True)
        else:
            # Pick up meson.build changes before introspecting.
            subprocess.run(['ninja', '-C', self.build, 'build.ninja'],
                           check=True, capture_output=True)
        self.introspect()

    def introspect(self):
        def intro(what):
            return json.loads(subprocess.run(
                ['meson', 'introspect', '--' + what, self.build], check=True,
                capture_output=True).stdout)
        tests = intro('tests')
        targets = {t['id']: t for t in intro('targets')}
        o = self.opts
        tests = [t for t in tests if t['name'] not in nets.NOT_BEHAVIOUR]
        self.unit = [Test(t) for t in tests
                     if suites_of(t) & set(o.unit_suites)]
        if o.checker_runs:
            by_name = {t['name']: t for t in tests}
            missing = [n for n in o.checker_runs if n not in by_name]
            if missing:
                raise SystemExit('mutate: no such test: %s' % ', '.join(missing))
            self.checker = [Test(by_name[n]) for n in o.checker_runs]
        else:
            self.checker = [Test(t) for t in tests if is_checker_run(t)]
        need = set(getattr(o, 'suites', None) or ())
        self.suites = {s: [Test(t) for t in tests if s in suites_of(t)]
                       for s in sorted(need)}
        if not getattr(o, 'fsm', True):
            self.unit, self.checker = [], []
        for t in self.all_tests():
            self.test_targets[t.name] = sorted(
                [os.path.relpath(fn, self.build) for d in t.depends
                 for fn in targets[d]['filename']] +
                nets.EXTRA_TARGETS.get(t.name, []))
        wanted = set()
        for t in self.all_tests():
            wanted.update(self.test_targets[t.name])
        self.targets = sorted(wanted)

    def all_tests(self):
        """Every test of every net once (a test of two nets is one run)."""
        seen, out = set(), []
        for t in self.unit + self.checker + [
                t for s in sorted(self.suites) for t in self.suites[s]]:
            if t.name not in seen:
                seen.add(t.name)
                out.append(t)
        return out

    def compile(self, targets=None, jobs=None):
        """(ok, output tail) of building every target the nets need (or
        `targets`: what one mutant's nets need), with `jobs` ninja jobs
        (default: the cores shared among the workers)."""
        if targets is not None and not targets:
            # Every net of the mutant is `nocov`: nothing runs, nothing to
            # build (an empty target list would make ninja build all).
            return True, ''
        cmd = ['ninja', '-C', self.build, '-j',
               str(jobs or self.opts.ninja_jobs)]
        p = subprocess.run(cmd + (self.targets if targets is None
                                  else targets), capture_output=True)
        text = (p.stdout + p.stderr).decode(errors='replace')
        return p.returncode == 0, text[-OUTPUT_KEEP:]

    # -- the nets ----------------------------------------------------------
    def run_test(self, t):
        env = dict(os.environ)
        env.update(t.env)
        cwd = t.workdir or self.build
        return run_limited(t.cmd, cwd, env, t.timeout(self.opts.timeout_factor))

    def run_net(self, tests, detail, all_tests=False, first_name=None):
        first, others, t_all = None, [], 0.0
        for t in lead_with(tests, first_name):
            rc, text, secs = self.run_test(t)
            t_all += secs
            if rc == 0:
                continue
            if rc is None:
                o = Outcome('timeout', t.name, '', secs)
            else:
                o = Outcome('killed', t.name, detail(text), secs)
            if first is None:
                first = o
                first.tail = text[-2000:]
            else:
                others.append(o.cell())
            if not all_tests:
                break
        if first is None:
            return Outcome('pass', secs=t_all)
        first.secs, first.others = t_all, others
        return first

    def pick(self, m, tests):
        """(mode, tests) a net runs on mutant m: all of them, or with a
        coverage map only those that executed m's lines."""
        if self.cov is None:
            return coverage.FALLBACK, tests
        return coverage.select(self.cov, m.path, m.line, m.last_line, tests)

    def targets_of(self, tests):
        """What ninja must build for these tests (only the picked tests'
        binaries: a mutant no test of a net can see costs no link)."""
        return sorted({x for t in tests for x in self.test_targets[t.name]})

    def judge(self, m, net, tests, detail, first_name=None):
        """One net's verdict on mutant m: every test of `tests` in order,
        or with a coverage map only those that executed m's lines."""
        mode, run = self.pick(m, tests)
        if self.cov is not None:
            self.selection.append((m.id, net, mode, len(run), len(tests)))
            if mode == coverage.NONE:
                return Outcome('nocov')
        return self.run_net(run, detail, self.opts.all_tests, first_name)

    def baseline(self, log):
        """Run both nets on the unmutated tree, timing every test."""
        ok, text = self.compile()
        if not ok:
            raise SystemExit('mutate: the unmutated tree does not build:\n' +
                             text[-4000:])
        secs_of = {}
        for t in self.all_tests():
            rc, text, secs = self.run_test(t)
            if rc != 0:
                # Once more: on a loaded machine a process test can miss
                # its own start-up bound (xferd not listening within
                # 10 s); a test that fails twice on the clean tree is a
                # broken net, and no mutant can be judged by it.
                log('baseline: %s failed (exit %s), running it again' % (
                    t.name, rc))
                rc, text, secs = self.run_test(t)
            if rc != 0:
                raise SystemExit(
                    'mutate: baseline: %s fails on the unmutated tree '
                    '(exit %s):\n%s' % (t.name, rc, text[-4000:]))
            secs_of[t.name] = secs
        self.set_baseline(secs_of)
        # Cheapest checker run first: most mutants it catches, it catches
        # in its first seconds.
        self.checker.sort(key=lambda t: (t.baseline, t.name))
        log('baseline: unit %.1f s (%d tests), checker %.1f s (%s)' % (
            sum(t.baseline for t in self.unit), len(self.unit),
            sum(t.baseline for t in self.checker),
            ', '.join('%s %.1f' % (t.name, t.baseline) for t in self.checker)))
        for s in sorted(self.suites):
            log('baseline: suite %s %.1f s (%d tests)' % (
                s, sum(t.baseline for t in self.suites[s]),
                len(self.suites[s])))

    def order_checker(self, names):
        """Put the checker runs in a given order (a baseline's order)."""
        rank = {n: i for i, n in enumerate(names)}
        self.checker.sort(key=lambda t: (rank.get(t.name, len(rank)), t.name))

    def set_baseline(self, secs):
        for t in self.unit + self.checker + [
                t for s in self.suites.values() for t in s]:
            if t.name in secs:
                t.baseline = secs[t.name]
        # Within a suite net, the cheapest test first.
        for s in self.suites.values():
            s.sort(key=lambda t: (t.baseline or 0.0, t.name))

    # -- one mutant --------------------------------------------------------
    def run_mutant(self, m):
        if nets.nets_of(m.path) is not nets.FSM_NETS:
            return self.run_mutant_suites(m, nets.nets_of(m.path))
        path = os.path.join(self.src, m.path)
        original = read_text(path)
        t0 = time.monotonic()
        res = {'unit': None, 'checker': None}
        try:
            with open(path, 'w') as f:
                f.write(m.apply(original))
            ok, text = self.compile(None if self.cov is None else
                                    self.targets_of(
                                        self.pick(m, self.unit)[1] +
                                        self.pick(m, self.checker)[1]))
            build_s = time.monotonic() - t0
            if not ok:
                res.update(status='stillborn', build_s=build_s,
                           secs=time.monotonic() - t0,
                           note=first_error(text))
                return res
            hint = getattr(m, 'hint', {})
            res['unit'] = self.judge(m, 'unit', self.unit, unit_detail,
                                     hint.get('unit'))
            res['checker'] = self.judge(m, 'checker', self.checker,
                                        checker_detail, hint.get('checker'))
            caught = res['unit'].caught or res['checker'].caught
            res.update(status='killed' if caught else 'survived',
                       build_s=build_s, secs=time.monotonic() - t0, note='')
            return res
        finally:
            with open(path, 'w') as f:
                f.write(original)


    def run_mutant_suites(self, m, suites):
        """A transport/ mutant: build only the test binaries of the suites
        that can see its file, and run each suite as a net of its own (to
        its first failure).  res['unit'] is the first failure of any suite
        (or pass), res['nets'] every suite's verdict."""
        path = os.path.join(self.src, m.path)
        original = read_text(path)
        t0 = time.monotonic()
        res = {'unit': None, 'checker': None, 'nets': []}
        targets = self.targets_of([t for s in suites for t in
                                   self.pick(m, self.suites.get(s, []))[1]])
        try:
            with open(path, 'w') as f:
                f.write(m.apply(original))
            ok, text = self.compile(targets)
            build_s = time.monotonic() - t0
            if not ok:
                res.update(status='stillborn', build_s=build_s,
                           secs=time.monotonic() - t0,
                           note=first_error(text))
                return res
            hint = getattr(m, 'hint', {})
            first = None
            for s in suites:
                o = self.judge(m, s, self.suites.get(s, []), unit_detail,
                               hint.get('unit'))
                res['nets'].append((s, o))
                if o.caught and first is None:
                    first = o
            res['unit'] = first or Outcome('pass')
            res.update(status='killed' if first else 'survived',
                       build_s=build_s, secs=time.monotonic() - t0, note='')
            return res
        finally:
            with open(path, 'w') as f:
                f.write(original)


def lead_with(tests, name):
    """The tests in their order, with the one called name (if any) first.

    With --from, a net first runs the test that caught the mutant last
    time: a mutant still caught costs that one test, not every test before
    it.  Whether a net catches a mutant does not depend on the order; only
    which test is named first may."""
    lead = [t for t in tests if t.name == name]
    return lead + [t for t in tests if t.name != name]


def catcher(cell):
    """The test that caught a mutant, from a result cell, or None."""
    if not cell or cell in ('pass', '-'):
        return None
    parts = cell.split(',')[0].split(':')
    return parts[1] if len(parts) > 1 else None


def first_error(text):
    for line in text.splitlines():
        if ' error: ' in line or ': error:' in line:
            return line.strip()[:160]
    return 'build failed'
