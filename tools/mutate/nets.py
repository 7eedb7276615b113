"""tools/mutate/nets.py - which nets can see a file, and which lines are new.

fsm/ mutants go through the two nets of issue 14 (the unit and fault
suites, and the checker's CI runs).  A transport/ mutant cannot reach the
checker (it models fsm/ and its own engine), so it goes through the suites
whose tests link and drive that file: FILE_NETS maps a file to them.  Each
suite is a net of its own and is scored on its own: within a suite the
tests run cheapest first and the suite stops at its first failure, then
the next suite runs, so a mutant gets one verdict per suite it can reach.

since_lines() gives the lines of a file that differ from an older commit
(`git diff -U0 REV -- FILE`, the new side of every hunk): how a sample is
restricted to the code written since some point (--since REV).

What must stay true: the map is a pure function of the path (the first
pattern that matches wins) and every transport/*.c file matches one; the
line set is a pure function of the repository and REV.
"""

import fnmatch
import re
import subprocess

# The suites that reach the library through the engine, the server and the
# consumer: the unit tests of the engine, server and consumer objects, the
# hostile peers and kills (fault), real xferd processes (multiproc), the
# public objects as programs use them (api) and the binding (python).
WHOLE_STACK = ['unit', 'fault', 'multiproc', 'api', 'python']
DEVICE = ['testdev', 'unit', 'fault', 'multiproc', 'api']

# (pattern, suites), first match wins.
FILE_NETS = [
    # The one-sided path: only the software fabric reaches it (the real
    # device suite `rdma` skips without hardware).
    ('transport/rdma*.c', ['rdma-sim']),
    ('transport/server_rdma*.c', ['rdma-sim', 'fault']),
    # The wire codec: its unit test and fuzz corpus, the hostile peers'
    # malformed frames, every real connection.
    ('transport/wire*.c', ['unit', 'fault', 'multiproc', 'api']),
    # The shard server: its unit test, the hostile peers, quotas, drain
    # and take grace (fault), xferd in multiproc, the api tier, python.
    # Its device side (server_copy.c: the copies into a device pool;
    # server_check.c: the check after the copy) is reached only by suite
    # testdev (the survivor server_check.c:194 of the issue-30 sample).
    ('transport/server_copy.c', WHOLE_STACK + ['testdev']),
    ('transport/server_check.c', WHOLE_STACK + ['testdev']),
    ('transport/server*.c', WHOLE_STACK),
    ('transport/auth.c', WHOLE_STACK),
    # The consumer: unit test_consumer, killall (fault), deploy, api, python,
    # and, for the consumer and the producer's transport that follow a
    # group through the directory (issue 28), suite etcd (the survivor
    # consumer_link.c:568 of the issue-30 sample: test_dir_tcp_consumer
    # kills it, but etcd was not among its nets).
    ('transport/consumer*.c', WHOLE_STACK + ['etcd']),
    ('transport/tcp*.c', WHOLE_STACK + ['etcd']),
    # The engine: its gate and copy step (engine_gate.c, engine_copy.c)
    # and the caller-CRC calls of device staging are reached only by
    # suite testdev (the survivor engine.c:1087, a gated CRC submit).
    ('transport/engine*.c', WHOLE_STACK + ['testdev']),
    # The etcd directory: its own suite starts a real etcd (the survivor
    # dir.c:373 of the issue-30 sample was reachable only there).
    ('transport/dir*.c', ['etcd', 'unit', 'api']),
    # Device memory: suite testdev is the only one that registers device
    # pools (the survivor mem.c:22) or loads a CUDA driver (its cudafake).
    ('transport/mem.c', DEVICE),
    ('transport/copy*.c', DEVICE),
    ('transport/testdev.c', DEVICE),
    ('transport/cuda_drv.c', DEVICE),
    # The shared primitives and the rest of the library.
    ('transport/*.c', ['unit', 'fault', 'multiproc', 'api']),
]

FSM_NETS = None  # fsm/ and the tables: the issue-14 nets (unit+fault, checker)

# Tests of the build, not of behaviour, left out of every net: `walls`
# copies and rebuilds the tree to check which directory may include what,
# `public_headers` compiles each public header alone.  A mutant inside a
# function body changes neither, and on a loaded machine walls alone costs
# minutes per mutant.
NOT_BEHAVIOUR = {'walls', 'public_headers'}

# Programs a test runs that its meson `depends` does not name (so building
# only the nets' targets leaves them out and the test fails on the clean
# tree): tools_cli checks every installed tool, xfer-bench-scale included.
EXTRA_TARGETS = {'tools_cli': ['tools/bench/xfer-bench-scale']}


def nets_of(path):
    """The suites that judge a mutant of `path`, or FSM_NETS (None) for
    the machines (the unit+fault net and the checker net)."""
    if not path.startswith('transport/'):
        return FSM_NETS
    for pattern, suites in FILE_NETS:
        if fnmatch.fnmatch(path, pattern):
            return list(suites)
    return ['unit', 'fault']


HUNK_RE = re.compile(r'^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@', re.M)


def changed_lines(diff_text):
    """Line numbers on the new side of a `diff -U0` text."""
    out = set()
    for m in HUNK_RE.finditer(diff_text):
        first = int(m.group(1))
        count = int(m.group(2)) if m.group(2) is not None else 1
        out.update(range(first, first + count))
    return out


def since_lines(root, rev, path):
    """Lines of the working-tree `path` added or changed since `rev`."""
    p = subprocess.run(['git', '-C', root, 'diff', '-U0', '--no-color',
                        '--no-ext-diff', rev, '--', path],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise ValueError('git diff %s -- %s: %s' % (rev, path,
                                                    p.stderr.strip()))
    if not p.stdout:
        # Unchanged, or new and untracked (then every line is new).
        tracked = subprocess.run(['git', '-C', root, 'cat-file', '-e',
                                  '%s:%s' % (rev, path)],
                                 capture_output=True).returncode == 0
        if tracked:
            return set()
        with open('%s/%s' % (root, path)) as f:
            return set(range(1, f.read().count('\n') + 2))
    return changed_lines(p.stdout)


def is_new(m, lines):
    """A mutant is in the new code when any line it edits is new."""
    return any(n in lines for n in range(m.line, m.last_line + 1))


def cell_of(outcomes):
    """`suite=verdict;...` of a mutant's per-suite outcomes, in order."""
    return ';'.join('%s=%s' % (s, o.cell()) for s, o in outcomes)


def parse_cell(cell):
    """[(suite, verdict cell)] of a `nets` column ('' or '-': none)."""
    if not cell or cell == '-':
        return []
    out = []
    for part in cell.split(';'):
        suite, _, verdict = part.partition('=')
        out.append((suite, verdict))
    return out
