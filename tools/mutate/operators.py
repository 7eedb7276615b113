"""tools/mutate/operators.py - the mutation operators and the mutant list.

Each operator walks one source (a csource.Scan of an fsm/*.c file, or the
text of include/xfer/fsm.h for the tables) and proposes one-spot edits: a
byte range and its replacement.  enumerate_mutants() turns the proposals of
every selected file and operator into Mutant objects with two names:

  id   FILE:LINE:OPERATOR:INDEX  for people (INDEX counts the mutants of
       that operator on that line, in source order);
  key  10 hex digits, a hash of the file, the function, the operator, the
       text of the mutated line(s) and the ordinal among identical
       proposals in that function; it survives edits elsewhere in the file,
       so a later run (after other files or functions changed) can find
       the same mutants again (mutate.py --from OLD).

What must stay true: the list is a pure function of the sources (same text,
same list, same order, same ids and keys), and no operator ever edits
inside assert() or a declaration.
"""

import hashlib
import os
import re

import csource

CMP_FLIP = {'<': '<=', '<=': '<', '>': '>=', '>=': '>', '==': '!=', '!=': '=='}
RELATIONAL = {'<', '<=', '>', '>='}
LOGIC_SWAP = {'&&': '||', '||': '&&'}
# Calls whose arguments are checks, not logic.
CHECK_CALLS = {'assert', 'static_assert', '_Static_assert'}
# Tokens that end an operand on the right of a comparison.
OPERAND_END = {')', ';', '&&', '||', '?', ':', ',', ']'}
OPERAND_START = {'(', '&&', '||', ',', 'return', '=', '?', ':', '!'}

TABLE_FILE = 'include/xfer/fsm.h'
# Table macro -> the .c file that defines its handlers.
TABLE_HANDLERS = {
    'XFER_TRANSFER_TABLE': 'fsm/transfer.c',
    'XFER_RESV_TABLE': 'fsm/shard.c',
    'XFER_READY_TABLE': 'fsm/readiness.c',
}
CELL_RE = re.compile(r'X\((\s*\w+),(\s*\w+),(\s*)(TRANSITION|IGNORE|DEFER|ILLEGAL),'
                     r'(\s*)(\w+)\)')

OPERATOR_NAMES = ['cmp', 'neg', 'logic', 'bound', 'drop', 'default', 'verdict']
OPERATOR_HELP = {
    'cmp': 'flip a comparison: < <=, > >=, == !=',
    'neg': 'negate the condition of an if, while or do-while',
    'logic': 'swap && and ||',
    'bound': 'an integer literal compared with < <= > >= moves by one',
    'drop': 'drop an expression statement or assignment (becomes {})',
    'default': 'a value set in a *defaults function, divided or '
               'multiplied by 10',
    'verdict': 'a cell of a machine table in include/xfer/fsm.h gets '
               'another verdict (and handler none)',
}


def read_text(path):
    with open(path) as f:
        return f.read()


class Proposal:
    """One edit an operator proposes, before it gets its id and key."""

    def __init__(self, op, start, end, repl, line, last_line, func, what):
        self.op, self.start, self.end, self.repl = op, start, end, repl
        self.line, self.last_line, self.func, self.what = (
            line, last_line, func, what)


class Mutant:
    def __init__(self, path, prop, index, key, before, after):
        self.path = path
        self.op = prop.op
        self.line = prop.line
        self.last_line = prop.last_line
        self.func = prop.func
        self.start, self.end, self.repl = prop.start, prop.end, prop.repl
        self.index = index
        self.id = '%s:%d:%s:%d' % (path, prop.line, prop.op, index)
        self.key = key
        self.what = prop.what
        self.before, self.after = before, after

    def apply(self, text):
        return text[:self.start] + self.repl + text[self.end:]


# ---------------------------------------------------------------------------
# Operators over fsm/*.c
# ---------------------------------------------------------------------------

def excluded_tokens(scan):
    """Token indices inside assert-like calls."""
    out = set()
    for first, last in scan.call_spans(CHECK_CALLS):
        out.update(range(first, last + 1))
    return out


def body_tokens(scan):
    """(token index, function) for every token inside a function body."""
    skip = excluded_tokens(scan)
    for f in scan.functions:
        for i in range(f.body_first + 1, f.body_last):
            if i not in skip:
                yield i, f


def op_cmp(scan):
    for i, f in body_tokens(scan):
        t = scan.toks[i]
        if t.text in CMP_FLIP:
            new = CMP_FLIP[t.text]
            yield Proposal('cmp', t.start, t.end, new, t.line, t.line, f.name,
                           '%s -> %s' % (t.text, new))


def op_logic(scan):
    for i, f in body_tokens(scan):
        t = scan.toks[i]
        if t.text in LOGIC_SWAP:
            new = LOGIC_SWAP[t.text]
            yield Proposal('logic', t.start, t.end, new, t.line, t.line,
                           f.name, '%s -> %s' % (t.text, new))


def parse_int(text):
    m = re.fullmatch(r'(0[xX][0-9a-fA-F]+|[0-9]+)([uUlL]*)', text)
    if not m:
        return None
    digits, suffix = m.groups()
    if len(digits) > 1 and digits[0] == '0' and digits[1] not in 'xX':
        return None  # octal: leave alone
    return int(digits, 0), suffix


def op_bound(scan):
    toks = scan.toks
    for i, f in body_tokens(scan):
        if toks[i].text not in RELATIONAL:
            continue
        sides = []
        if i + 2 < len(toks) and toks[i + 1].kind == 'num' and \
                toks[i + 2].text in OPERAND_END:
            sides.append(i + 1)
        if i >= 2 and toks[i - 1].kind == 'num' and \
                toks[i - 2].text in OPERAND_START:
            sides.append(i - 1)
        for j in sides:
            lit = toks[j]
            parsed = parse_int(lit.text)
            if parsed is None:
                continue
            value, suffix = parsed
            for new in (value - 1, value + 1):
                if new < 0:
                    continue
                repl = '%d%s' % (new, suffix)
                yield Proposal('bound', lit.start, lit.end, repl, lit.line,
                               lit.line, f.name, '%s %s -> %s' % (
                                   toks[i].text, lit.text, repl))


def op_neg(scan):
    toks = scan.toks
    for f in scan.functions:
        for s in f.stmts:
            if s.kind not in ('if', 'while', 'do') or not s.cond:
                continue
            a, b = s.cond
            if b <= a:
                continue
            start, end = toks[a].start, toks[b - 1].end
            inner = scan.text[start:end]
            yield Proposal('neg', start, end, '!(%s)' % inner, toks[a].line,
                           toks[b - 1].line, f.name,
                           '%s (c) -> %s (!(c))' % (s.kind, s.kind))


def is_check_stmt(scan, s):
    toks = scan.toks
    t = toks[s.first].text
    if t in CHECK_CALLS:
        return True
    # (void)x; evaluates nothing worth dropping.
    return t == '(' and toks[s.first + 1].text == 'void'


def op_drop(scan):
    toks = scan.toks
    for f in scan.functions:
        for s in f.stmts:
            if s.kind != 'expr' or is_check_stmt(scan, s):
                continue
            a, b = toks[s.first], toks[s.last]
            yield Proposal('drop', a.start, b.end, '{}', a.line, b.line,
                           f.name, 'statement dropped')


def assignment_eq(scan, s):
    """Token index of the top-level '=' of an assignment statement."""
    toks = scan.toks
    j = s.first
    while j < s.last:
        t = toks[j].text
        if t in csource.OPEN:
            j = csource.match(toks, j) + 1
            continue
        if t == '=':
            return j
        j += 1
    return None


def op_default(scan):
    toks = scan.toks
    for f in scan.functions:
        if 'defaults' not in f.name:
            continue
        for s in f.stmts:
            if s.kind != 'expr':
                continue
            eq = assignment_eq(scan, s)
            if eq is None:
                continue
            lhs = [t.text for t in toks[s.first:eq]]
            if '->' not in lhs and '.' not in lhs:
                continue  # a copy of the whole config, not a default
            a, b = toks[eq + 1], toks[s.last - 1]
            rhs = scan.text[a.start:b.end]
            field = lhs[-1]
            for sym in ('/', '*'):
                yield Proposal('default', a.start, b.end,
                               '(%s) %s 10' % (rhs, sym), a.line, b.line,
                               f.name, '%s %s 10' % (field, sym))


C_OPERATORS = {'cmp': op_cmp, 'neg': op_neg, 'logic': op_logic,
               'bound': op_bound, 'drop': op_drop, 'default': op_default}


# ---------------------------------------------------------------------------
# The verdict operator over include/xfer/fsm.h
# ---------------------------------------------------------------------------

def null_handlers(root, cfile):
    """Handler tokens that a machine's .c file defines as NULL."""
    try:
        text = read_text(os.path.join(root, cfile))
    except OSError:
        return {'none'}
    return set(re.findall(r'#define h_(\w+) NULL', text)) | {'none'}


def verdict_swaps(verdict, handler, nulls):
    """The (verdict, handler) pairs a cell is mutated to."""
    if verdict == 'ILLEGAL':
        return [('IGNORE', 'none')]
    out = []
    if handler not in nulls:
        out.append(('IGNORE', 'none'))  # the handler no longer runs
    elif verdict != 'IGNORE':
        out.append(('IGNORE', handler))
    out.append(('ILLEGAL', 'none'))
    return out


def op_verdict(root, text):
    offset, table = 0, None
    nulls = set()
    for lineno, line in enumerate(text.split('\n'), 1):
        m = re.match(r'#define (XFER_\w+_TABLE)\(X\)', line)
        if m:
            table = m.group(1)
            nulls = null_handlers(root, TABLE_HANDLERS.get(table, ''))
        elif table and not line.rstrip().endswith('\\'):
            table = None  # the last line of the macro
        m = CELL_RE.search(line) if table else None
        if m:
            state, event = m.group(1).strip(), m.group(2).strip()
            verdict, handler = m.group(4), m.group(6)
            a = offset + m.start(4)
            b = offset + m.end(6)
            for v, h in verdict_swaps(verdict, handler, nulls):
                repl = '%s,%s%s' % (v, m.group(5), h)
                yield Proposal('verdict', a, b, repl, lineno, lineno, table,
                               '(%s, %s) %s %s -> %s %s' % (
                                   state, event, verdict, handler, v, h))
        offset += len(line) + 1


# ---------------------------------------------------------------------------
# The list
# ---------------------------------------------------------------------------

def default_files(root):
    fsm = sorted(f for f in os.listdir(os.path.join(root, 'fsm'))
                 if f.endswith('.c'))
    return ['fsm/' + f for f in fsm] + [TABLE_FILE]


def proposals(root, path, ops):
    text = read_text(os.path.join(root, path))
    out = []
    if path.endswith('.h'):
        if 'verdict' in ops and path == TABLE_FILE:
            out.extend(op_verdict(root, text))
        return text, out
    scan = csource.Scan(text)
    for name in OPERATOR_NAMES:
        if name in ops and name in C_OPERATORS:
            out.extend(C_OPERATORS[name](scan))
    out.sort(key=lambda p: (p.start, OPERATOR_NAMES.index(p.op), p.repl))
    return text, out


def squeeze(s):
    return ' '.join(s.split())


def enumerate_mutants(root, files=None, ops=None):
    """Every mutant of `files` (paths relative to root) under `ops`."""
    files = files or default_files(root)
    ops = ops or OPERATOR_NAMES
    mutants = []
    for path in files:
        text, props = proposals(root, path, ops)
        lines = text.split('\n')
        per_line, per_anchor = {}, {}
        for p in props:
            span = lines[p.line - 1:p.last_line]
            anchor = squeeze(' '.join(span))
            n = per_line.get((p.line, p.op), 0)
            per_line[(p.line, p.op)] = n + 1
            akey = (p.func, p.op, anchor, p.repl)
            k = per_anchor.get(akey, 0)
            per_anchor[akey] = k + 1
            key = hashlib.sha1(('%s|%s|%s|%s|%s|%d' % (
                path, p.func, p.op, anchor, p.repl, k)).encode()).hexdigest()
            mutated = (text[:p.start] + p.repl + text[p.end:]).split('\n')
            after_span = mutated[p.line - 1:p.last_line +
                                 len(mutated) - len(lines)]
            before = squeeze(' '.join(span))
            after = squeeze(' '.join(after_span))
            mutants.append(Mutant(path, p, n, key[:10], before, after))
    return mutants
