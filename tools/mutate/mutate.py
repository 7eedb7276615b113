#!/usr/bin/env python3
"""tools/mutate/mutate.py - xfer's own mutation harness (issue 14).

Enumerates one-spot mutants of fsm/*.c and of the machine tables in
include/xfer/fsm.h (operators.py), builds each in a scratch copy of the
tree (runner.py) and runs it through two nets: the unit and fault suites,
and the checker's CI configurations (suite model's exit-0 xfer-check runs).
It prints, and writes to --out, which net caught each mutant and how;
results.py scores them and compares two runs.  README.md says how to run
it and how to read the output.

What must stay true: the repository it runs from is only read (mutants
live in SCRATCH, default build-mutate/ in the repository); the same
sources and arguments give the same mutants; a result file can be
compared with any later one (--compare) and its mutants rerun on later
sources (--from).
"""

import argparse
import glob
import os
import random
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import coverage  # noqa: E402
import nets  # noqa: E402
import operators  # noqa: E402
import results  # noqa: E402
import runner  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
EQUIVALENT = os.path.join(HERE, 'equivalent.txt')


class Parser(argparse.ArgumentParser):
    """A bad flag is one line on stderr and exit 2, like every xfer tool."""

    def error(self, message):
        fail(message)


def parse_args(argv):
    p = Parser(
        prog='tools/run mutate',
        description='Mutation testing of fsm/: which mutants the unit+fault '
                    'suites and the xfer-check CI runs catch.')
    p.add_argument('--list', action='store_true',
                   help='print the selected mutants and stop')
    p.add_argument('--only', nargs='+', metavar='ID',
                   help='run only these mutants (ids or keys)')
    p.add_argument('--sample', type=int, metavar='N',
                   help='a seeded sample of N mutants, spread evenly over '
                        'the operators')
    p.add_argument('--seed', type=int, default=1,
                   help='seed of --sample (default 1)')
    p.add_argument('--operators', metavar='OP,...',
                   help='operators to use (default all: %s)' %
                        ','.join(operators.OPERATOR_NAMES))
    p.add_argument('--files', metavar='PATH,...',
                   help='files to mutate, relative to the repository, '
                        'shell patterns allowed (default fsm/*.c and '
                        'include/xfer/fsm.h; transport/*.c for transport/)')
    p.add_argument('--since', metavar='REV',
                   help='only mutants on lines added or changed since '
                        'commit REV (git diff -U0 REV)')
    p.add_argument('--from', dest='from_file', metavar='OLD',
                   help='run exactly the mutants of result file OLD, found '
                        'again by key in today\'s sources')
    p.add_argument('--jobs', type=int, default=1,
                   help='mutants run at once, each in its own scratch tree '
                        '(default 1)')
    p.add_argument('--out', metavar='FILE',
                   help='write the results (TSV) here, rewritten after '
                        'every mutant')
    p.add_argument('--resume', action='store_true',
                   help='keep the rows already in --out and run the rest')
    p.add_argument('--compare', metavar='OLD',
                   help='compare the results with result file OLD')
    p.add_argument('--report', metavar='FILE',
                   help='score an existing result file (no run)')
    p.add_argument('--equivalent', default=EQUIVALENT, metavar='FILE',
                   help='the equivalence file (default %s)' %
                        os.path.relpath(EQUIVALENT, ROOT))
    p.add_argument('--run-equivalent', action='store_true',
                   help='run the mutants of the equivalence file too')
    p.add_argument('--all-tests', action='store_true',
                   help='run every test of both nets (do not stop a net at '
                        'its first failure)')
    p.add_argument('--scratch', default=os.path.join(ROOT, 'build-mutate'),
                   help='scratch trees and builds (default build-mutate/)')
    p.add_argument('--unit-suites', default=','.join(runner.UNIT_SUITES),
                   help='suites of the unit net (default unit,fault)')
    p.add_argument('--checker-runs', metavar='NAME,...',
                   help='tests of the checker net (default: every exit-0 '
                        'xfer-check run of suite model)')
    p.add_argument('--mem-limit-mb', dest='mem_mb', type=int, default=4096,
                   help='data limit (RLIMIT_DATA) of every test (default 4096)')
    p.add_argument('--timeout-factor', type=float, metavar='F',
                   help='a test times out after F times its baseline time '
                        '(at least %d s) instead of meson\'s timeout' %
                        runner.MIN_TIMEOUT_S)
    p.add_argument('--no-baseline', action='store_true',
                   help='skip the baseline run (quick checks only: the clean '
                        'tree is trusted to pass, timeouts are meson\'s)')
    p.add_argument('--select-by-coverage', action='store_true',
                   help='run only the tests of a net that executed the '
                        'mutated line on the clean tree (coverage.py); a '
                        'line no test of a net executes is "nocov" there. '
                        'Replaces the baseline run by the coverage run')
    p.add_argument('--coverage-map', metavar='FILE',
                   help='the cached map (default '
                        'SCRATCH/coverage-map.json.gz; rebuilt when the '
                        'sources differ from its hash)')
    p.add_argument('--coverage-rerun-failing', action='store_true',
                   help='with a cached map: run again the tests it marks '
                        'failing on the clean tree, and keep their new '
                        'entries')
    p.add_argument('--coverage-build', default=os.path.join(ROOT, 'build-cov'),
                   metavar='DIR',
                   help='the coverage build directory (default build-cov/)')
    p.add_argument('--verbose', action='store_true',
                   help='print each mutant and the end of the output of the '
                        'test that caught it')
    a = p.parse_args(argv)
    if a.jobs < 1:
        p.error('--jobs must be at least 1')
    if a.sample is not None and a.sample < 1:
        p.error('--sample must be at least 1')
    a.unit_suites = [s for s in a.unit_suites.split(',') if s]
    a.checker_runs = ([s for s in a.checker_runs.split(',') if s]
                      if a.checker_runs else None)
    a.ninja_jobs = max(1, (os.cpu_count() or 2) // a.jobs)
    if a.coverage_map is None:
        a.coverage_map = os.path.join(a.scratch, 'coverage-map.json.gz')
    return a


def fail(msg):
    print('mutate: ' + msg, file=sys.stderr)
    sys.exit(2)


def select(a, mutants, log):
    if a.operators:
        unknown = set(a.operators.split(',')) - set(operators.OPERATOR_NAMES)
        if unknown:
            fail('unknown operator %s' % ','.join(sorted(unknown)))
    if a.from_file:
        _, rows = results.read(a.from_file)
        by_key = {m.key: m for m in mutants}
        gone = [r for r in rows if r['key'] not in by_key]
        for r in gone:
            log('from %s: %s %s is gone (its line changed): %s' % (
                a.from_file, r['id'], r['key'], r['before']))
        mutants = [by_key[r['key']] for r in rows if r['key'] in by_key]
        for r in rows:
            if r['key'] in by_key:
                by_key[r['key']].hint = {
                    net: runner.catcher(r.get(net)) for net in ('unit',
                                                               'checker')}
    if a.only:
        want = set(a.only)
        found = [m for m in mutants if m.id in want or m.key in want]
        missing = want - {m.id for m in found} - {m.key for m in found}
        if missing:
            fail('no such mutant: %s' % ' '.join(sorted(missing)))
        mutants = found
    if a.sample is not None:
        rng = random.Random(a.seed)
        per_op = []
        for op in operators.OPERATOR_NAMES:
            group = [m for m in mutants if m.op == op]
            rng.shuffle(group)
            per_op.append(group)
        picked = []
        while len(picked) < a.sample and any(per_op):
            for group in per_op:
                if group and len(picked) < a.sample:
                    picked.append(group.pop(0))
        # In the order picked: every prefix of the run is spread over the
        # operators (and the files), so a run cut short is still a sample.
        mutants = picked
    return mutants


def expand_files(patterns):
    """The files named by `patterns` (shell patterns, relative to the
    repository), in order, each once; a pattern that names none fails."""
    out = []
    for pat in patterns:
        found = sorted(os.path.relpath(f, ROOT) for f in
                       glob.glob(os.path.join(ROOT, pat))
                       if os.path.isfile(f))
        if not found:
            fail('no such file: %s' % pat)
        out.extend(f for f in found if f not in out)
    return out


def since(rev, mutants):
    """The mutants whose lines changed since `rev`."""
    lines = {}
    out = []
    for m in mutants:
        if m.path not in lines:
            lines[m.path] = nets.since_lines(ROOT, rev, m.path)
        if nets.is_new(m, lines[m.path]):
            out.append(m)
    return out


def source_state():
    try:
        head = subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short=12',
                               'HEAD'], capture_output=True, check=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(['git', '-C', ROOT, 'status', '--porcelain',
                                '--untracked-files=no'], capture_output=True,
                               text=True).stdout.strip()
        return head + (' (with uncommitted changes)' if dirty else '')
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'


def ran_cell(sel):
    """`NET=RUN/ALL:MODE;...` of one mutant's selections, '-' if none."""
    return ';'.join('%s=%d/%d:%s' % (net, n, total, mode)
                    for net, mode, n, total in sel) or '-'


def row_of(m, res, sel=()):
    def cell(o):
        return o.cell() if o else '-'
    return {'ran': ran_cell(sel),
            'id': m.id, 'key': m.key, 'op': m.op, 'status': res['status'],
            'unit': cell(res['unit']), 'checker': cell(res['checker']),
            'nets': nets.cell_of(res.get('nets') or []) or '-',
            'secs': '%.1f' % res['secs'], 'build_s': '%.1f' % res['build_s'],
            'func': m.func, 'what': m.what, 'before': m.before,
            'after': m.after}


def equivalent_row(m):
    return {'id': m.id, 'key': m.key, 'op': m.op, 'status': 'equivalent',
            'unit': '-', 'checker': '-', 'nets': '-', 'secs': '0',
            'build_s': '0',
            'func': m.func, 'what': m.what, 'before': m.before,
            'after': m.after}


def run(a, todo, equiv, log):
    done_rows = {}
    if a.resume and a.out and os.path.exists(a.out):
        _, old = results.read(a.out)
        done_rows = {r['key']: r for r in old}
        log('resume: %d mutants already in %s' % (len(done_rows), a.out))
    pending = [m for m in todo if m.key not in done_rows]
    runner.limit_memory(a.mem_mb)
    workers = [runner.Worker(ROOT, a.scratch, k, a)
               for k in range(min(a.jobs, max(1, len(pending))))]
    for w in workers:
        w.sync()
        w.setup(log)
    cmap = None
    if a.select_by_coverage:
        cmap = coverage_map(a, workers[0], log)
        for w in workers:
            w.cov = cmap
        ok, text = workers[0].compile(jobs=os.cpu_count())
        if not ok:
            fail('the unmutated tree does not build:\n' + text[-2000:])
        # The coverage run is the baseline: every test ran once on the
        # clean tree (instrumented, so a little slower: looser timeouts).
        workers[0].set_baseline({n: t['secs'] for n, t in cmap.tests.items()})
    elif a.no_baseline:
        ok, text = workers[0].compile(jobs=os.cpu_count())
        if not ok:
            fail('the unmutated tree does not build:\n' + text[-2000:])
    else:
        workers[0].baseline(log)
    secs = {t.name: t.baseline for t in workers[0].all_tests()
            if t.baseline is not None}
    order = [t.name for t in workers[0].checker]
    for w in workers[1:]:
        ok, text = w.compile(jobs=os.cpu_count())
        if not ok:
            fail('scratch tree %s does not build:\n%s' % (w.dir, text[-2000:]))
        w.set_baseline(secs)
        w.order_checker(order)
    header = [
        ('command', 'tools/run mutate ' + ' '.join(sys.argv[1:])),
        ('source', source_state()),
        ('started', time.strftime('%Y-%m-%d %H:%M:%S')),
        ('unit net', ' '.join(t.name for t in workers[0].unit)),
        ('checker net', ' '.join(order)),
        ('baseline seconds', ' '.join('%s=%.2f' % kv for kv in secs.items())),
    ]
    if cmap is not None:
        header.append(('selection', 'by coverage, map %s of tree %s' % (
            os.path.relpath(a.coverage_map, ROOT), cmap.tree_hash[:12])))
        header.append(('failing on the clean tree (left out)',
                       ' '.join(cmap.failing()) or 'none'))
        header.append(('partial coverage (always run)',
                       ' '.join(cmap.partial()) or 'none'))
    rows = dict(done_rows)
    lock = threading.Lock()
    queue = list(pending)
    t_start = time.monotonic()
    count = [0]

    def save():
        if a.out:
            order_keys = [m.key for m in todo]
            out_rows = [rows[k] for k in order_keys if k in rows]
            extra = [r for k, r in rows.items() if k not in set(order_keys)]
            results.write(a.out, header + [(
                'elapsed', '%.0f s' % (time.monotonic() - t_start))],
                out_rows + extra)

    def work(w):
        while True:
            with lock:
                if not queue:
                    return
                m = queue.pop(0)
            res = w.run_mutant(m)
            sel = [x[1:] for x in w.selection if x[0] == m.id]
            r = row_of(m, res, sel)
            with lock:
                rows[m.key] = r
                count[0] += 1
                verdicts = ('nets=' + r['nets'] if r['nets'] != '-' else
                            'unit=%s checker=%s' % (r['unit'], r['checker']))
                log('[%d/%d] %s %s %s  %s  (%s s)%s%s' % (
                    count[0], len(pending), m.id, m.key, r['status'],
                    verdicts, r['secs'],
                    ('  ran ' + r['ran']) if r['ran'] != '-' else '',
                    ('  ' + res['note']) if res.get('note') else ''))
                if a.verbose:
                    log('    %s\n -> %s' % (m.before, m.after))
                    for net in ('unit', 'checker'):
                        o = res[net]
                        if o is not None and o.caught and o.tail:
                            log('  %s output ends:\n%s' % (net, o.tail))
                save()

    threads = [threading.Thread(target=work, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    save()
    elapsed = time.monotonic() - t_start
    ran = [rows[m.key] for m in pending if m.key in rows]
    built = [r for r in ran if r['status'] != 'stillborn']
    log('%d mutants in %.0f s (%.1f s each on average, %.1f s per built '
        'mutant), %d jobs' % (len(ran), elapsed, elapsed / max(1, len(ran)),
                              sum(float(r['secs']) for r in built) /
                              max(1, len(built)), len(workers)))
    return [rows[m.key] for m in todo if m.key in rows]


def coverage_map(a, w, log):
    """The coverage map of today's sources: the cached one if its tree
    hash matches, else built (coverage.build_map) and cached."""
    tree = coverage.tree_hash(ROOT, runner.repo_files(ROOT))
    cmap = coverage.load(a.coverage_map, tree)
    if cmap is not None:
        log('coverage: map %s (tree %s, %d tests)' % (
            a.coverage_map, tree[:12], len(cmap.tests)))
        if a.coverage_rerun_failing and coverage.rerun_failing(
                cmap, ROOT, os.path.abspath(a.coverage_build), log,
                runner.run_limited,
                lambda spec: float(spec.get('timeout') or 0) or 600.0):
            coverage.save(a.coverage_map, cmap)
        return cmap
    log('coverage: no map of tree %s in %s; building it' % (
        tree[:12], a.coverage_map))
    t0 = time.monotonic()
    cmap = coverage.build_map(
        ROOT, os.path.abspath(a.coverage_build),
        # The checker's runs stay out of the map (minutes each under gcov,
        # and they execute most of fsm/): select() runs every test it does
        # not know, so the checker net is whole.
        [t for t in w.all_tests() if t not in w.checker], tree, log,
        runner.run_limited,
        lambda spec: float(spec.get('timeout') or 0) or 600.0)
    coverage.save(a.coverage_map, cmap)
    log('coverage: map of %d tests in %.0f s, %d bytes' % (
        len(cmap.tests), time.monotonic() - t0,
        os.path.getsize(a.coverage_map)))
    return cmap


def main(argv):
    # `--report F | head` ends quietly, like any filter.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    a = parse_args(argv)
    log = print
    equiv = results.read_equivalent(a.equivalent)
    if a.report:
        _, rows = results.read(a.report)
        results.summary(rows, equiv, log)
        results.listing(rows, equiv, log)
        if a.compare:
            results.compare(results.read(a.compare)[1], rows, equiv, log)
        return 0
    files = expand_files(a.files.split(',')) if a.files else None
    ops = a.operators.split(',') if a.operators else None
    try:
        mutants = operators.enumerate_mutants(ROOT, files, ops)
        if a.since:
            mutants = since(a.since, mutants)
    except ValueError as e:
        fail('cannot scan the sources: %s' % e)
    todo = select(a, mutants, log)
    if a.list:
        for m in todo:
            log('%s %s %s: %s\n      %s\n   -> %s' % (
                m.id, m.key, m.func, m.what, m.before, m.after))
        log('%d mutants' % len(todo))
        return 0
    skipped = [] if a.run_equivalent else [m for m in todo if m.key in equiv]
    if skipped:
        log('%d mutants of %s left out (equivalent)' % (
            len(skipped), os.path.relpath(a.equivalent)))
        todo = [m for m in todo if m not in skipped]
    if not todo:
        fail('no mutant selected')
    a.fsm = any(nets.nets_of(m.path) is nets.FSM_NETS for m in todo)
    a.suites = sorted({s for m in todo for s in nets.nets_of(m.path) or ()})
    if not a.fsm:
        a.unit_suites = []
    log('%d mutants selected of %d (%s)' % (len(todo), len(mutants), ', '.join(
        '%s %d' % (op, sum(m.op == op for m in todo))
        for op in operators.OPERATOR_NAMES if any(m.op == op for m in todo))))
    rows = run(a, todo, equiv, log) + [
        equivalent_row(m) for m in skipped]
    results.summary(rows, equiv, log)
    results.listing(rows, equiv, log)
    if a.compare:
        results.compare(results.read(a.compare)[1], rows, equiv, log)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
