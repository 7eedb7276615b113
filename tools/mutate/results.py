"""tools/mutate/results.py - the result file, the equivalence file, scores.

A result file is tab-separated text: '#' header lines (the command, the
source commit, the nets and their baseline times) and one row per mutant:

  id key op status unit checker secs build_s func what before after

status is stillborn, killed or survived; unit and checker say what each
net did: `pass` (the mutant got through), `killed:TEST[:DETAIL]` (DETAIL:
the Check test function for unit, the invariant for the checker) or
`timeout:TEST` (counted as killed), `-` when the net did not run.
A transport/ mutant has no checker verdict (`-`); its `nets` column says
what each suite that can see its file did, `SUITE=VERDICT;...` (nets.py),
and its unit column is the first suite's failure.  Files of issue 14 have
no `nets` column; it reads as `-`.  With --select-by-coverage a net's
verdict may be `nocov` (no test of it executed the mutated line on the
clean tree, so none ran: it got through), and the `ran` column says per
net how many of its tests ran and why, `NET=RUN/ALL:MODE;...` (MODE
`some`, `none` or `fallback`: the map could not place the line and the
whole net ran); `-` without selection.

The equivalence file (equivalent.txt) has one line per equivalent mutant,
`ID KEY reason`; its mutants are left out of every score and listed.
Rows and equivalents are matched by key (stable across edits elsewhere),
then by id.  What must stay true: a score is always computed over the same
population for both nets (built, not equivalent), so the nets compare.
"""

import os

COLUMNS = ['id', 'key', 'op', 'status', 'unit', 'checker', 'secs',
           'build_s', 'func', 'what', 'before', 'after', 'nets', 'ran']


def clean(v):
    return ' '.join(str(v).split()) if v is not None else ''


def write(path, header, rows):
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write('# xfer mutate results v1\n')
        for k, v in header:
            f.write('# %s: %s\n' % (k, clean(v)))
        f.write('\t'.join(COLUMNS) + '\n')
        for r in rows:
            f.write('\t'.join(clean(r.get(c, '')) for c in COLUMNS) + '\n')
    os.replace(tmp, path)


def read(path):
    header, rows = [], []
    with open(path) as f:
        for line in f:
            line = line.rstrip('\n')
            if line.startswith('# '):
                k, _, v = line[2:].partition(': ')
                if v:
                    header.append((k, v))
                continue
            if not line or line.split('\t')[0] == 'id':
                continue
            vals = line.split('\t')
            row = dict(zip(COLUMNS, vals + [''] * (len(COLUMNS) -
                                                    len(vals))))
            row['nets'] = row['nets'] or '-'
            row['ran'] = row['ran'] or '-'
            rows.append(row)
    return header, rows


def read_equivalent(path):
    """{key: (id, reason)} of the equivalence file (missing file: empty)."""
    out = {}
    if not path or not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise SystemExit('%s:%d: want "ID KEY reason"' % (path, n))
            out[parts[1]] = (parts[0], parts[2])
    return out


def is_equivalent(row, equiv):
    if row['key'] in equiv:
        return True
    return any(i == row['id'] for i, _ in equiv.values())


def caught(cell):
    return cell.startswith('killed') or cell.startswith('timeout')


class Tally:
    def __init__(self):
        self.total = self.stillborn = self.equivalent = self.scored = 0
        self.unit = self.checker = self.either = self.timeouts = 0

    def add(self, row, equiv):
        self.total += 1
        if row['status'] == 'stillborn':
            self.stillborn += 1
            return
        if is_equivalent(row, equiv):
            self.equivalent += 1
            return
        if row['status'] not in ('killed', 'survived'):
            return
        self.scored += 1
        u, c = caught(row['unit']), caught(row['checker'])
        self.unit += u
        self.checker += c
        self.either += u or c
        # a cell's verdict, not a test name that says "timeout"
        self.timeouts += (row['unit'].startswith('timeout') or
                          row['checker'].startswith('timeout'))


def pct(n, d):
    return '%5.1f%%' % (100.0 * n / d) if d else '    - '


def summary(rows, equiv, out):
    """Print the score table, per operator and in all."""
    ops = []
    for r in rows:
        if r['op'] not in ops:
            ops.append(r['op'])
    per = {op: Tally() for op in ops}
    total = Tally()
    for r in rows:
        per[r['op']].add(r, equiv)
        total.add(r, equiv)
    out('%-9s %7s %9s %6s %6s %12s %12s %12s' % (
        'operator', 'mutants', 'stillborn', 'equiv', 'scored',
        'unit+fault', 'checker', 'together'))
    for name, t in [(op, per[op]) for op in ops] + [('all', total)]:
        out('%-9s %7d %9d %6d %6d %5d %6s %5d %6s %5d %6s' % (
            name, t.total, t.stillborn, t.equivalent, t.scored,
            t.unit, pct(t.unit, t.scored), t.checker,
            pct(t.checker, t.scored), t.either, pct(t.either, t.scored)))
    out('score over %d scored mutants: unit+fault %s, checker %s, together '
        '%s (%d timed out, counted as killed)' % (
            total.scored, pct(total.unit, total.scored).strip(),
            pct(total.checker, total.scored).strip(),
            pct(total.either, total.scored).strip(), total.timeouts))
    net_summary(rows, equiv, out)
    return total


def net_scores(rows, equiv):
    """{suite: (scored mutants it ran on, caught)} over the rows with
    per-suite verdicts (transport/ mutants), suites in first-seen order."""
    out = {}
    for r in rows:
        if r['status'] not in ('killed', 'survived') or \
                is_equivalent(r, equiv):
            continue
        for suite, cell in parse_nets(r.get('nets', '-')):
            ran, got = out.get(suite, (0, 0))
            out[suite] = (ran + 1, got + caught(cell))
    return out


def parse_nets(cell):
    if not cell or cell == '-':
        return []
    return [tuple(p.partition('=')[::2]) for p in cell.split(';')]


def net_summary(rows, equiv, out):
    """Print the score of each suite net (transport/ mutants)."""
    scores = net_scores(rows, equiv)
    if not scores:
        return scores
    nocov = nocov_counts(rows, equiv)
    out('%-10s %7s %7s %7s %8s' % ('suite net', 'ran on', 'caught', 'score',
                                   'no cov.'))
    for suite, (ran, got) in scores.items():
        out('%-10s %7d %7d %7s %8d' % (suite, ran, got, pct(got, ran),
                                       nocov.get(suite, 0)))
    out('(no cov.: survivors of that net on a line none of its tests '
        'executed on the clean tree; nothing ran)')
    return scores


def nocov_counts(rows, equiv):
    """{net: scored mutants it let through for want of coverage}."""
    out = {}
    for r in rows:
        if r['status'] not in ('killed', 'survived') or \
                is_equivalent(r, equiv):
            continue
        cells = parse_nets(r.get('nets', '-')) or [
            ('unit', r['unit']), ('checker', r['checker'])]
        for suite, cell in cells:
            if cell == 'nocov':
                out[suite] = out.get(suite, 0) + 1
    return out


def listing(rows, equiv, out):
    surv = [r for r in rows if r['status'] == 'survived' and
            not is_equivalent(r, equiv)]
    eq = [r for r in rows if is_equivalent(r, equiv)]
    only_unit = [r for r in rows if r['status'] == 'killed' and
                 not is_equivalent(r, equiv) and caught(r['unit']) and
                 not caught(r['checker'])]
    only_checker = [r for r in rows if r['status'] == 'killed' and
                    not is_equivalent(r, equiv) and caught(r['checker']) and
                    not caught(r['unit'])]
    for title, group in (('survived both nets', surv),
                         ('caught by unit+fault only', only_unit),
                         ('caught by the checker only', only_checker)):
        out('%s: %d' % (title, len(group)))
        for r in group:
            out('  %s %s  %s\n      %s\n   -> %s' % (
                r['id'], r['key'], r['what'], r['before'], r['after']))
    out('equivalent (left out of the score): %d' % len(eq))
    for r in eq:
        reason = equiv.get(r['key'], ('', ''))[1] or next(
            (why for i, why in equiv.values() if i == r['id']), '')
        out('  %s %s  %s: %s' % (r['id'], r['key'], r['what'], reason))


def compare(old_rows, new_rows, equiv, out):
    """Match two result files by key and print what changed, per net."""
    old = {r['key']: r for r in old_rows}
    new = {r['key']: r for r in new_rows}
    common = [k for k in old if k in new]
    out('compare: %d mutants in both, %d only in the old file, %d only in '
        'the new' % (len(common), len(old) - len(common),
                     len(new) - len(common)))
    for net in ('unit', 'checker'):
        gained = [k for k in common if not caught(old[k][net]) and
                  caught(new[k][net]) and new[k]['status'] != 'stillborn']
        lost = [k for k in common if caught(old[k][net]) and
                not caught(new[k][net]) and new[k]['status'] != 'stillborn']
        out('%s: %d newly caught, %d no longer caught' % (
            net, len(gained), len(lost)))
        for k in gained:
            out('  + %s %s  %s  (%s)' % (new[k]['id'], k, new[k]['what'],
                                        new[k][net]))
        for k in lost:
            out('  - %s %s  %s  (was %s)' % (new[k]['id'], k, new[k]['what'],
                                            old[k][net]))
    out('old, on the mutants in both:')
    summary([old[k] for k in common], equiv, out)
    out('new, on the mutants in both:')
    summary([new[k] for k in common], equiv, out)
