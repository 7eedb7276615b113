"""tools/mutate/coverage.py - test selection by coverage (issue 30).

A mutant can only change what a test does if the test executes the mutated
line: up to that line the mutated run and the clean run are the same run
(for a deterministic test).  So a net need only run its tests that
executed the line on the clean tree, and a mutant on a line no test of a
net executes gets through that net without running anything ("no
coverage": a fact about the suite, kept apart from `pass` in the result
file).

The map comes from one build with gcov instrumentation (-Db_coverage=true,
a build directory of its own, default build-cov/): every test of the suite
nets runs once, alone, with every .gcda removed before it, under
covshim.so (so daemons the test SIGKILLs still write their counters), and
gcov says which lines of fsm/, transport/ and include/ it executed.  The
map is cached in a JSON file keyed by the hash of the tree's sources (every
repository file outside tools/mutate/), so it is rebuilt only when the code
or the tests change.

Where the map cannot answer, a net runs all its tests (the fallback):
  * a line gcov does not list for any object (a static table or
    initialiser, a line of a multi-line macro definition, a declaration,
    include/xfer/fsm.h's table cells): nothing is attributed to it;
  * a file the map does not know.
A test the map does not know (added since) is always run, and so is a
test whose map is partial: a child it forked without exec was SIGKILLed
or ended in _exit (covshim.c logs it), so its counters are lost; a test that
failed on the clean tree (twice) is left out of every net (it cannot
judge a mutant) and listed in the result file's header.

What must stay true: select() only ever drops a test that did not execute
any line of the mutant; the map is a pure function of the tree it names.
"""

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import nets

MAP_VERSION = 2
COVERED_DIRS = ('fsm/', 'transport/', 'include/')
HERE = os.path.dirname(os.path.abspath(__file__))


# -- the map as data ---------------------------------------------------------

def to_ranges(lines):
    """[[first, last], ...] of a set of line numbers (compact JSON)."""
    out = []
    for n in sorted(lines):
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def from_ranges(ranges):
    out = set()
    for a, b in ranges:
        out.update(range(a, b + 1))
    return out


class Map:
    """executable: {path: set(lines)}; tests: {name: {'secs', 'ok',
    'lines': {path: set(lines)}}}."""

    def __init__(self, tree_hash, executable, tests):
        self.tree_hash = tree_hash
        self.executable = executable
        self.tests = tests

    def to_json(self):
        return {
            'version': MAP_VERSION, 'tree': self.tree_hash,
            'executable': {p: to_ranges(ls)
                           for p, ls in sorted(self.executable.items())},
            'tests': {n: {'secs': round(t['secs'], 2), 'ok': t['ok'],
                          'partial': t.get('partial', False),
                          'lines': {p: to_ranges(ls) for p, ls in
                                    sorted(t['lines'].items())}}
                      for n, t in sorted(self.tests.items())}}

    @classmethod
    def from_json(cls, d):
        if d.get('version') != MAP_VERSION:
            raise ValueError('coverage map version %r' % d.get('version'))
        return cls(d['tree'],
                   {p: from_ranges(r) for p, r in d['executable'].items()},
                   {n: {'secs': t['secs'], 'ok': t['ok'],
                        'partial': t.get('partial', False),
                        'lines': {p: from_ranges(r)
                                  for p, r in t['lines'].items()}}
                    for n, t in d['tests'].items()})

    def partial(self):
        return sorted(n for n, t in self.tests.items() if t.get('partial'))

    def failing(self):
        return sorted(n for n, t in self.tests.items() if not t['ok'])


def save(path, cmap):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    with gzip.open(tmp, 'wt') as f:
        json.dump(cmap.to_json(), f, separators=(',', ':'))
    os.replace(tmp, path)


def load(path, tree_hash):
    """The map at path if it was made from this tree, else None."""
    try:
        with gzip.open(path, 'rt') as f:
            d = json.load(f)
    except (OSError, ValueError, EOFError):
        return None
    if d.get('tree') != tree_hash:
        return None
    try:
        return Map.from_json(d)
    except (KeyError, ValueError, TypeError):
        return None


# -- selection ----------------------------------------------------

FALLBACK, SOME, NONE = 'fallback', 'some', 'none'


def select(cmap, path, first, last, tests):
    """(mode, tests to run) for a mutant of `path` on lines first..last and
    a net's `tests` (objects with .name, in the net's order).

    FALLBACK: the map says nothing about these lines (no executable line
    among them, or an unknown file): every test, in order.
    SOME: the tests that executed one of the lines, plus every test the
    map does not know or knows only in part (a child of it forked without
    exec died without writing its counters), in the net's order, without
    the tests that failed on the clean tree.
    NONE: the lines are executable and no test of the net executed them
    (and the map knows every test of the net): the net cannot see it."""
    span = set(range(first, last + 1))
    bad = {n for n, t in cmap.tests.items() if not t['ok']}
    usable = [t for t in tests if t.name not in bad]
    if not span & cmap.executable.get(path, set()):
        return FALLBACK, usable
    picked = [t for t in usable if t.name not in cmap.tests or
              cmap.tests[t.name].get('partial') or
              span & cmap.tests[t.name]['lines'].get(path, set())]
    return (SOME if picked else NONE), picked


# -- building the map ---------------------------------------------

def tree_hash(root, files):
    """sha256 over the path and content of every repository file outside
    tools/mutate/ (the harness's own edits keep the map)."""
    h = hashlib.sha256()
    for f in files:
        if f.startswith('tools/mutate/'):
            continue
        h.update(f.encode() + b'\0')
        with open(os.path.join(root, f), 'rb') as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def build_shim(out_dir):
    so = os.path.join(out_dir, 'covshim.so')
    src = os.path.join(HERE, 'covshim.c')
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        os.makedirs(out_dir, exist_ok=True)
        subprocess.run(['gcc', '-O1', '-shared', '-fPIC', '-o', so, src,
                        '-ldl'], check=True)
    return so


def gcno_files(build):
    """Every .gcno of the build (gcov_lines says which matter)."""
    out = []
    for d, _, fs in os.walk(os.path.abspath(build)):
        for f in fs:
            if f.endswith('.gcno'):
                out.append(os.path.join(d, f))
    return sorted(out)


def remove_gcda(build):
    for d, _, fs in os.walk(build):
        for f in fs:
            if f.endswith('.gcda'):
                os.unlink(os.path.join(d, f))


def gcov_lines(build, src_root, gcnos, used=None, strict=True):
    """({path: executable lines}, {path: executed lines}) from gcov on the
    given objects (with or without their .gcda beside them); `used`, when
    given, gets the objects that compiled a line of COVERED_DIRS."""
    execu, hit = {}, {}
    # gcov reads X.gcda beside each X.gcno (none: "not executed").
    for i in range(0, len(gcnos), 40):
        batch = gcnos[i:i + 40]
        p = subprocess.run(['gcov', '--stdout', '--json-format'] + batch,
                           cwd=build, capture_output=True, text=True)
        if p.returncode != 0:
            if not strict:
                return None, None
            raise SystemExit('mutate: gcov failed: %s' % p.stderr[-2000:])
        for line in p.stdout.splitlines():
            line = line.strip()
            if not line.startswith('{'):
                continue
            d = json.loads(line)
            cwd = d.get('current_working_directory', build)
            for f in d.get('files', []):
                path = os.path.relpath(os.path.normpath(
                    os.path.join(cwd, f['file'])), src_root)
                if not path.startswith(COVERED_DIRS):
                    continue
                if used is not None and d.get('data_file'):
                    used.add(os.path.join(cwd, d['data_file']))
                e = execu.setdefault(path, set())
                h = hit.setdefault(path, set())
                for ln in f.get('lines', []):
                    e.add(ln['line_number'])
                    if ln['count'] > 0:
                        h.add(ln['line_number'])
    return execu, {p: ls for p, ls in hit.items() if ls}


def covered_objects(build, root):
    """(executable lines by path, the objects that compiled a line of
    COVERED_DIRS): what a test's counters are read from."""
    used = set()
    executable, _ = gcov_lines(build, root, gcno_files(build), used)
    return executable, sorted(used)


def cover_tests(build, root, specs, gcnos, shim, log, run_limited,
                timeout_of):
    """{name: {'secs', 'ok', 'lines', 'partial'}} of running each test spec
    (meson introspection entries) once, alone, under the shim."""
    result = {}
    for k, spec in enumerate(specs):
        env = dict(os.environ)
        env.update(spec.get('env') or {})
        env['LD_PRELOAD'] = ' '.join(x for x in (shim, env.get('LD_PRELOAD'))
                                     if x)
        ok, secs, hit, partial = False, 0.0, {}, False
        lost = os.path.join(build, 'mutate-covshim', 'lost.log')
        env['COVSHIM_LOG'] = lost
        for attempt in range(2):
            remove_gcda(build)
            if os.path.exists(lost):
                os.unlink(lost)
            rc, text, secs = run_limited(
                spec['cmd'], spec.get('workdir') or build, env,
                timeout_of(spec))
            partial = os.path.exists(lost) and os.path.getsize(lost) > 0
            # A test killed while its counters were written leaves data
            # gcov refuses: the test's lines are then unknown, so it is
            # partial (runs for every mutant of its nets) rather than the
            # end of a half-hour map run.
            _, h = gcov_lines(build, root, gcnos, strict=False)
            if h is None:
                partial, h = True, {}
                log('coverage: %s: gcov could not read its counters; '
                    'partial' % spec['name'])
            for path, ls in h.items():
                hit.setdefault(path, set()).update(ls)
            if rc == 0:
                ok = True
                break
            log('coverage: %s failed on the clean tree (exit %s)%s' % (
                spec['name'], rc, ', once more' if attempt == 0 else
                ': left out of every net'))
        result[spec['name']] = {'secs': secs, 'ok': ok, 'lines': hit,
                                'partial': partial}
        log('coverage: [%d/%d] %s %.1f s, %d lines%s' % (
            k + 1, len(specs), spec['name'], secs,
            sum(len(v) for v in hit.values()),
            ' (partial: a fork child lost its counters; always run)'
            if partial else ''))
    return result


def rerun_failing(cmap, root, build, log, run_limited, timeout_of):
    """Run again the tests cmap marks failing on the clean tree (a load
    spike, or a cause since fixed in the harness: the address-space cap
    that stopped etcd) and take their new entries; True when any changed.
    The build must be the map's tree (same hash)."""
    names = set(cmap.failing())
    if not names:
        return False
    intro = json.loads(subprocess.run(
        ['meson', 'introspect', '--tests', build], check=True,
        capture_output=True).stdout)
    specs = [t for t in intro if t['name'] in names]
    shim = build_shim(os.path.join(build, 'mutate-covshim'))
    _, gcnos = covered_objects(build, root)
    log('coverage: running again the %d tests that failed in the map run: '
        '%s' % (len(specs), ' '.join(sorted(names))))
    remove_gcda(build)
    got = cover_tests(build, root, specs, gcnos, shim, log, run_limited,
                      timeout_of)
    remove_gcda(build)
    cmap.tests.update(got)
    return True


def build_map(root, build, tests, tree, log, run_limited, timeout_of):
    """Configure and build `build` with coverage, run every test once and
    return the Map.  `tests` are runner.Test objects of the scratch build;
    their commands name the scratch build, so they are re-read from this
    build's introspection by name."""
    if not os.path.exists(os.path.join(build, 'build.ninja')):
        log('coverage: configuring %s' % build)
        subprocess.run(['meson', 'setup', build, root, '-Db_coverage=true'],
                       check=True, capture_output=True)
    intro = json.loads(subprocess.run(
        ['meson', 'introspect', '--tests', build], check=True,
        capture_output=True).stdout)
    targets = {t['id']: t for t in json.loads(subprocess.run(
        ['meson', 'introspect', '--targets', build], check=True,
        capture_output=True).stdout)}
    by_name = {t['name']: t for t in intro}
    want = [by_name[t.name] for t in tests if t.name in by_name]
    need = sorted({os.path.relpath(fn, build) for t in want
                   for d in t.get('depends') or [] for fn in
                   targets[d]['filename']} |
                  {x for t in want for x in
                   nets.EXTRA_TARGETS.get(t['name'], [])})
    t0 = time.monotonic()
    p = subprocess.run(['ninja', '-C', build] + need, capture_output=True)
    if p.returncode != 0:
        text = (p.stdout + p.stderr).decode(errors='replace')
        raise SystemExit('mutate: coverage build failed:\n' + text[-3000:])
    log('coverage: built %d targets in %.0f s' % (len(need),
                                                  time.monotonic() - t0))
    shim = build_shim(os.path.join(build, 'mutate-covshim'))
    remove_gcda(build)
    executable, gcnos = covered_objects(build, root)
    log('coverage: %d of %d objects compile fsm/, transport/ or include/' %
        (len(gcnos), len(gcno_files(build))))
    result = cover_tests(build, root, want, gcnos, shim, log, run_limited,
                         timeout_of)
    remove_gcda(build)
    return Map(tree, executable, result)


def main(argv):
    """python3 coverage.py MAP PATH LINE: which tests executed PATH:LINE."""
    if len(argv) != 3:
        print('usage: coverage.py MAP PATH LINE', file=sys.stderr)
        return 2
    with gzip.open(argv[0], 'rt') as f:
        cmap = Map.from_json(json.load(f))
    line = int(argv[2])
    print('executable: %s' % (line in cmap.executable.get(argv[1], ())))
    for n, t in sorted(cmap.tests.items(), key=lambda kv: kv[1]['secs']):
        if line in t['lines'].get(argv[1], ()):
            print('%-30s %7.1f s%s' % (n, t['secs'], '' if t['ok'] else
                                       ' (fails on the clean tree)'))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
