"""tools/mutate/test_mutate.py - checks of the harness itself (not in CI).

    /usr/bin/python3 -m unittest discover -s tools/mutate

The scanner and every operator on a small C text whose mutants are known,
the stability of ids and keys, the sample, the result file round trip and
the score.  Nothing here builds or runs the project.
"""

import os
import random
import subprocess
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import csource  # noqa: E402
import mutate  # noqa: E402
import nets  # noqa: E402
import operators  # noqa: E402
import results  # noqa: E402
import runner  # noqa: E402

SAMPLE_C = '''\
#include <assert.h>
/* a comment with if (a < b) */
#define TWICE(x) ((x) * 2)
typedef struct cfg { int ttl; int cap; } cfg;

static void set_defaults(cfg *c)
{
    if (!c->ttl)
        c->ttl = 60;
    *c = *c;
}

static int f(int a, int b, const int *p)
{
    int n = 0;
    assert(a < 100);
    for (int i = 0; i < b; i++) {
        if (a == i && b > 3)
            n += i;
        else
            n--;
    }
    while (n >= 10)
        n = n - 1;
    (void)p;
    return n <= a ? n : a;
}
'''


def ops_of(text, name):
    scan = csource.Scan(text)
    return list(operators.C_OPERATORS[name](scan))


class ScanTest(unittest.TestCase):
    def test_functions_and_kinds(self):
        s = csource.Scan(SAMPLE_C)
        self.assertEqual([f.name for f in s.functions], ['set_defaults', 'f'])
        kinds = [st.kind for st in s.functions[1].stmts]
        self.assertEqual(kinds, ['decl', 'expr', 'for', 'block', 'if', 'expr',
                                 'expr', 'while', 'expr', 'expr', 'jump'])

    def test_comments_and_directives_are_not_tokens(self):
        texts = [t.text for t in csource.tokenize(SAMPLE_C)]
        self.assertNotIn('TWICE', texts)
        self.assertNotIn('comment', texts)
        self.assertEqual(csource.tokenize('a->b >>= 2')[1].text, '->')
        self.assertEqual(csource.tokenize('a->b >>= 2')[3].text, '>>=')

    def test_declarations_recognised(self):
        s = csource.Scan('void g(void) { xfer_x *p = q; x_t y; *p = 1; '
                         'a->b = c; const int z = 2; h(&y); }')
        self.assertEqual([st.kind for st in s.functions[0].stmts],
                         ['decl', 'decl', 'expr', 'expr', 'decl', 'expr'])


class OperatorTest(unittest.TestCase):
    def test_cmp_skips_assert_and_comments(self):
        got = [(p.line, p.repl) for p in ops_of(SAMPLE_C, 'cmp')]
        self.assertEqual(got, [(17, '<='), (18, '!='), (18, '>='),
                               (23, '>'), (26, '<')])

    def test_drop_only_expression_statements(self):
        got = [SAMPLE_C[p.start:p.end] for p in ops_of(SAMPLE_C, 'drop')]
        self.assertEqual(got, ['c->ttl = 60;', '*c = *c;', 'n += i;', 'n--;',
                               'n = n - 1;'])

    def test_default_only_fields_in_defaults_functions(self):
        got = [p.repl for p in ops_of(SAMPLE_C, 'default')]
        self.assertEqual(got, ['(60) / 10', '(60) * 10'])

    def test_neg_logic_bound(self):
        neg = [p.repl for p in ops_of(SAMPLE_C, 'neg')]
        self.assertEqual(neg, ['!(!c->ttl)', '!(a == i && b > 3)',
                               '!(n >= 10)'])
        self.assertEqual([p.repl for p in ops_of(SAMPLE_C, 'logic')], ['||'])
        self.assertEqual([p.repl for p in ops_of(SAMPLE_C, 'bound')],
                         ['2', '4', '9', '11'])

    def test_verdict_swaps(self):
        nulls = {'none', 'container'}
        self.assertEqual(operators.verdict_swaps('TRANSITION', 'h', nulls),
                         [('IGNORE', 'none'), ('ILLEGAL', 'none')])
        self.assertEqual(
            operators.verdict_swaps('TRANSITION', 'container', nulls),
            [('IGNORE', 'container'), ('ILLEGAL', 'none')])
        self.assertEqual(operators.verdict_swaps('IGNORE', 'none', nulls),
                         [('ILLEGAL', 'none')])
        self.assertEqual(operators.verdict_swaps('ILLEGAL', 'none', nulls),
                         [('IGNORE', 'none')])


class RunLimitedTest(unittest.TestCase):
    def test_timeout_ends_a_spinning_child_in_its_own_group(self):
        # As Check's fork mode does: the test's child leaves the process
        # group (setpgid) and spins with the output pipe open.  The run
        # must still end at its timeout, with the child gone.
        cmd = [sys.executable, '-c',
               'import os, time\n'
               'if os.fork() == 0:\n'
               '    os.setpgid(0, 0)\n'
               '    while True: pass\n'
               'time.sleep(100)\n']
        # Before the fix this call never returned.
        rc, _, _ = runner.run_limited(cmd, tempfile.gettempdir(), None, 1)
        self.assertIsNone(rc)


class ListTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        os.makedirs(os.path.join(self.root, 'fsm'))
        with open(os.path.join(self.root, 'fsm', 'a.c'), 'w') as f:
            f.write(SAMPLE_C)

    def tearDown(self):
        self.dir.cleanup()

    def mutants(self):
        return operators.enumerate_mutants(self.root, ['fsm/a.c'])

    def test_same_source_same_list(self):
        a, b = self.mutants(), self.mutants()
        self.assertEqual([(m.id, m.key) for m in a],
                         [(m.id, m.key) for m in b])
        self.assertEqual(len({m.key for m in a}), len(a))
        self.assertEqual(len({m.id for m in a}), len(a))

    def test_keys_survive_an_edit_elsewhere(self):
        before = {m.key: m.what for m in self.mutants()}
        path = os.path.join(self.root, 'fsm', 'a.c')
        with open(path, 'w') as f:
            f.write('/* new */\nstatic int g(void) { return 1 < 2; }\n' +
                    SAMPLE_C)
        after = self.mutants()
        f_keys = {m.key for m in after if m.func == 'f'}
        self.assertTrue(f_keys <= set(before))
        self.assertTrue(all(m.line > 2 for m in after if m.func == 'f'))

    def test_sample_is_seeded_and_spread(self):
        ms = self.mutants()
        a = types.SimpleNamespace(operators=None, from_file=None, only=None,
                                  sample=6, seed=4)
        s1 = mutate.select(a, ms, lambda *_: None)
        s2 = mutate.select(a, ms, lambda *_: None)
        self.assertEqual([m.key for m in s1], [m.key for m in s2])
        self.assertEqual(len({m.op for m in s1}), 6)

    def test_apply_changes_only_the_spot(self):
        m = self.mutants()[0]
        new = m.apply(SAMPLE_C)
        self.assertNotEqual(new, SAMPLE_C)
        self.assertEqual(len(new.split('\n')), len(SAMPLE_C.split('\n')))


class ResultsTest(unittest.TestCase):
    def rows(self):
        rnd = random.Random(2)
        out = []
        for i, (status, unit, checker) in enumerate([
                ('killed', 'killed:transfer:test_x', 'pass'),
                ('killed', 'pass', 'killed:bfs_s2:I5'),
                ('killed', 'timeout:engine', 'killed:bfs_s3:I1'),
                ('killed', 'killed:transfer:test_cancel_op_timeout', 'pass'),
                ('survived', 'pass', 'pass'),
                ('survived', 'pass', 'pass'),
                ('stillborn', '-', '-')]):
            out.append({'id': 'fsm/a.c:%d:cmp:0' % i,
                        'key': '%010x' % rnd.getrandbits(40), 'op': 'cmp',
                        'status': status, 'unit': unit, 'checker': checker,
                        'secs': '1.0', 'build_s': '0.5', 'func': 'f',
                        'what': '< -> <=', 'before': 'a < b',
                        'after': 'a <= b', 'nets': '-', 'ran': '-'})
        return out

    def test_round_trip_and_score(self):
        rows = self.rows()
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 'r.tsv')
            results.write(p, [('command', 'x')], rows)
            header, back = results.read(p)
            eq = os.path.join(d, 'eq.txt')
            with open(eq, 'w') as f:
                f.write('# comment\n%s %s cannot differ\n' % (
                    rows[4]['id'], rows[4]['key']))
            equiv = results.read_equivalent(eq)
        self.assertEqual(header, [('command', 'x')])
        self.assertEqual(back, rows)
        t = results.summary(back, equiv, lambda *_: None)
        self.assertEqual((t.total, t.stillborn, t.equivalent, t.scored),
                         (7, 1, 1, 5))
        self.assertEqual((t.unit, t.checker, t.either, t.timeouts),
                         (3, 2, 4, 1))


class NetsTest(unittest.TestCase):
    def test_every_transport_file_has_its_suites(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))))
        files = sorted(f for f in os.listdir(os.path.join(root, 'transport'))
                       if f.endswith('.c'))
        self.assertTrue(files)
        for f in files:
            suites = nets.nets_of('transport/' + f)
            self.assertTrue(suites, f)
            self.assertNotIn('model', suites)
        self.assertIs(nets.nets_of('fsm/transfer.c'), nets.FSM_NETS)
        self.assertIs(nets.nets_of('include/xfer/fsm.h'), nets.FSM_NETS)
        self.assertEqual(nets.nets_of('transport/rdma.c'), ['rdma-sim'])
        self.assertIn('rdma-sim', nets.nets_of('transport/server_rdma.c'))
        self.assertIn('python', nets.nets_of('transport/server_sess.c'))
        self.assertNotIn('rdma-sim', nets.nets_of('transport/server_sess.c'))

    def test_changed_lines_of_a_diff(self):
        diff = ('@@ -3,0 +4,2 @@ f\n+a\n+b\n@@ -10 +12 @@\n-x\n+y\n'
                '@@ -20,3 +22,0 @@\n-p\n-q\n-r\n')
        self.assertEqual(nets.changed_lines(diff), {4, 5, 12})

    def test_a_mutant_is_new_when_one_of_its_lines_is(self):
        m = types.SimpleNamespace(line=7, last_line=9)
        self.assertTrue(nets.is_new(m, {9}))
        self.assertFalse(nets.is_new(m, {6, 10}))

    def test_suite_cells_round_trip_and_score(self):
        o_pass = runner.Outcome('pass')
        o_kill = runner.Outcome('killed', 'hostile', 'test_h_auth')
        cell = nets.cell_of([('unit', o_pass), ('fault', o_kill)])
        self.assertEqual(cell, 'unit=pass;fault=killed:hostile:test_h_auth')
        self.assertEqual(nets.parse_cell(cell),
                         [('unit', 'pass'),
                          ('fault', 'killed:hostile:test_h_auth')])
        base = {'op': 'drop', 'unit': '-', 'checker': '-', 'id': 'x',
                'secs': '1', 'build_s': '1', 'func': 'f', 'what': 'w',
                'before': 'b', 'after': 'a'}
        rows = [dict(base, key='k1', id='ik1', status='killed', nets=cell),
                dict(base, key='k2', id='ik2', status='survived',
                     nets='unit=pass;fault=pass'),
                dict(base, key='k3', id='ik3', status='stillborn', nets='-'),
                dict(base, key='k4', id='ik4', status='killed',
                     nets='rdma-sim=timeout:fabric')]
        equiv = {}
        self.assertEqual(results.net_scores(rows, equiv),
                         {'unit': (2, 0), 'fault': (2, 1),
                          'rdma-sim': (1, 1)})
        equiv = {'k1': ('ik1', 'same')}
        self.assertEqual(results.net_scores(rows, equiv)['fault'], (1, 0))

    def test_since_keeps_only_new_lines(self):
        with tempfile.TemporaryDirectory() as d:
            def git(*args):
                subprocess.run(['git', '-C', d] + list(args), check=True,
                               capture_output=True)
            git('init', '-q')
            git('config', 'user.email', 't@t')
            git('config', 'user.name', 't')
            os.makedirs(os.path.join(d, 'transport'))
            path = os.path.join(d, 'transport', 'x.c')
            old = 'int f(int a)\n{\n    if (a < 1)\n        a = 2;\n' \
                  '    return a;\n}\n'
            with open(path, 'w') as f:
                f.write(old)
            git('add', '.')
            git('commit', '-q', '-m', 'old')
            new = old.replace('    return a;\n',
                              '    if (a > 5)\n        a = 5;\n'
                              '    return a;\n')
            with open(path, 'w') as f:
                f.write(new)
            self.assertEqual(nets.since_lines(d, 'HEAD', 'transport/x.c'),
                             {5, 6})
            ms = operators.enumerate_mutants(d, ['transport/x.c'])
            lines = nets.since_lines(d, 'HEAD', 'transport/x.c')
            fresh = [m for m in ms if nets.is_new(m, lines)]
            self.assertTrue(fresh)
            self.assertTrue(all(m.line in (5, 6) for m in fresh))
            self.assertTrue(any(m.line == 3 for m in ms))


class SyncTest(unittest.TestCase):
    def test_a_changed_file_is_newer_than_the_last_build(self):
        with tempfile.TemporaryDirectory() as d:
            root = os.path.join(d, 'repo')
            os.makedirs(root)
            subprocess.run(['git', '-C', root, 'init', '-q'], check=True)
            f = os.path.join(root, 'a.c')
            with open(f, 'w') as fh:
                fh.write('int a;\n')
            w = runner.Worker(root, os.path.join(d, 'scratch'), 0, None)
            w.sync()
            copy = os.path.join(w.src, 'a.c')
            # the source edited an hour ago, the scratch built since
            with open(f, 'w') as fh:
                fh.write('int b;\n')
            old = os.path.getmtime(copy) - 3600
            os.utime(f, (old, old))
            w.sync()
            with open(copy) as fh:
                self.assertEqual(fh.read(), 'int b;\n')
            self.assertGreater(os.path.getmtime(copy), old + 1800)


class HintTest(unittest.TestCase):
    def test_catcher_of_a_cell(self):
        self.assertEqual(runner.catcher('killed:transfer:test_x'), 'transfer')
        self.assertEqual(runner.catcher('killed:bfs_s2:I5,killed:bfs_s3:I1'),
                         'bfs_s2')
        self.assertEqual(runner.catcher('timeout:engine'), 'engine')
        self.assertEqual(runner.catcher('killed:trace_golden_core'),
                         'trace_golden_core')
        for cell in ('pass', '-', '', None):
            self.assertIsNone(runner.catcher(cell))

    def test_lead_with_moves_only_the_catcher(self):
        tests = [types.SimpleNamespace(name=n) for n in 'abcd']
        self.assertEqual([t.name for t in runner.lead_with(tests, 'c')],
                         ['c', 'a', 'b', 'd'])
        self.assertEqual([t.name for t in runner.lead_with(tests, None)],
                         list('abcd'))
        self.assertEqual([t.name for t in runner.lead_with(tests, 'zz')],
                         list('abcd'))



def fake_test(name):
    return types.SimpleNamespace(name=name)


class CoverageSelectTest(unittest.TestCase):
    """coverage.select on a small synthetic map: transport/a.c has lines
    10-20 executable (30 is a table initialiser: not executable); t_cheap
    ran 10-12, t_slow ran 10-15, t_other ran only b.c, t_bad failed on the
    clean tree."""

    def setUp(self):
        import coverage
        self.cov = coverage
        lines = {'transport/a.c': set(range(10, 21)),
                 'transport/b.c': {5, 6}}
        self.map = coverage.Map('h', lines, {
            't_cheap': {'secs': 1.0, 'ok': True, 'partial': False,
                        'lines': {'transport/a.c': {10, 11, 12}}},
            't_slow': {'secs': 9.0, 'ok': True, 'partial': False,
                       'lines': {'transport/a.c': set(range(10, 16))}},
            't_other': {'secs': 2.0, 'ok': True, 'partial': False,
                        'lines': {'transport/b.c': {5}}},
            't_bad': {'secs': 1.0, 'ok': False, 'partial': False,
                      'lines': {'transport/a.c': set(range(10, 21))}},
        })
        self.net = [fake_test(n) for n in
                    ('t_cheap', 't_other', 't_bad', 't_slow')]

    def names(self, mode_tests):
        mode, tests = mode_tests
        return mode, [t.name for t in tests]

    def test_only_the_tests_that_ran_the_line_in_net_order(self):
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 11, 11,
                                       self.net)),
            ('some', ['t_cheap', 't_slow']))
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 14, 14,
                                       self.net)),
            ('some', ['t_slow']))

    def test_a_multi_line_mutant_takes_any_of_its_lines(self):
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 16, 19,
                                       self.net)),
            ('none', []))
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 15, 19,
                                       self.net)),
            ('some', ['t_slow']))

    def test_an_executable_line_nobody_ran_is_no_coverage(self):
        mode, tests = self.cov.select(self.map, 'transport/a.c', 20, 20,
                                      self.net)
        self.assertEqual((mode, tests), ('none', []))

    def test_a_line_the_map_cannot_place_runs_the_whole_net(self):
        # a table initialiser, a header's table cell, an unknown file
        for path, line in (('transport/a.c', 30), ('include/xfer/fsm.h', 7),
                           ('transport/new.c', 3)):
            self.assertEqual(
                self.names(self.cov.select(self.map, path, line, line,
                                           self.net)),
                ('fallback', ['t_cheap', 't_other', 't_slow']), path)

    def test_a_test_unknown_to_the_map_always_runs(self):
        net = self.net + [fake_test('t_new')]
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 20, 20,
                                       net)),
            ('some', ['t_new']))

    def test_a_test_with_partial_coverage_always_runs(self):
        self.map.tests['t_other']['partial'] = True
        self.assertEqual(
            self.names(self.cov.select(self.map, 'transport/a.c', 20, 20,
                                       self.net)),
            ('some', ['t_other']))
        self.assertEqual(self.map.partial(), ['t_other'])

    def test_a_test_failing_on_the_clean_tree_never_runs(self):
        for line in (10, 20, 30):
            _, names = self.names(self.cov.select(
                self.map, 'transport/a.c', line, line, self.net))
            self.assertNotIn('t_bad', names)

    def test_map_round_trips_and_is_keyed_by_tree(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, 'm.json.gz')
            self.cov.save(path, self.map)
            self.assertIsNone(self.cov.load(path, 'other-tree'))
            back = self.cov.load(path, 'h')
            self.assertEqual(back.executable, self.map.executable)
            self.assertEqual(back.tests, self.map.tests)
            self.assertEqual(back.failing(), ['t_bad'])

    def test_tree_hash_ignores_the_harness_only(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, 'tools', 'mutate'))
            os.makedirs(os.path.join(d, 'fsm'))
            for f, text in (('fsm/a.c', 'x'), ('tools/mutate/m.py', 'y')):
                with open(os.path.join(d, f), 'w') as fh:
                    fh.write(text)
            files = ['fsm/a.c', 'tools/mutate/m.py']
            h0 = self.cov.tree_hash(d, files)
            with open(os.path.join(d, 'tools/mutate/m.py'), 'w') as fh:
                fh.write('changed')
            self.assertEqual(self.cov.tree_hash(d, files), h0)
            with open(os.path.join(d, 'fsm/a.c'), 'w') as fh:
                fh.write('changed')
            self.assertNotEqual(self.cov.tree_hash(d, files), h0)

    def test_judge_without_coverage_runs_nothing_and_says_nocov(self):
        w = runner.Worker('/nonexistent', '/nonexistent', 0,
                          types.SimpleNamespace(all_tests=False,
                                                timeout_factor=None))
        w.cov = self.map
        w.run_net = lambda *a, **k: self.fail('a test ran')
        m = types.SimpleNamespace(id='transport/a.c:20:cmp:0',
                                  path='transport/a.c', line=20, last_line=20)
        o = w.judge(m, 'unit', self.net, runner.unit_detail)
        self.assertEqual((o.cell(), o.caught), ('nocov', False))
        self.assertEqual(results.caught(o.cell()), False)
        self.assertEqual(mutate.ran_cell([x[1:] for x in w.selection]),
                         'unit=0/4:none')


if __name__ == '__main__':
    unittest.main()
