"""tools/mutate/csource.py - just enough of C to place mutants in fsm/.

A tokenizer (comments, strings, character constants and preprocessor lines
are skipped, punctuators are matched longest first) and a statement scanner
that finds every function body and every statement in it: its kind (an
expression statement, a declaration, a jump, a control statement, a label),
its tokens, and for `if`/`while`/`for`/`do` the tokens of the condition.

What must stay true: the scan is a pure function of the text (the same
source gives the same functions, statements and tokens, in source order),
and it never guesses across a function boundary.  It is not a C parser:
declarations are recognised by their first tokens (a type keyword, or
`name name` / `name *name`), which is what fsm/ writes.
"""

import re

PUNCTUATORS = sorted([
    '>>=', '<<=', '...', '->', '++', '--', '<<', '>>', '<=', '>=', '==',
    '!=', '&&', '||', '*=', '/=', '%=', '+=', '-=', '&=', '^=', '|=', '##',
] + list('{}[]()<>;:,.?!~%^&*-+=/|#'), key=len, reverse=True)

TYPE_WORDS = {
    'const', 'static', 'volatile', 'register', 'extern', 'auto', 'typedef',
    'unsigned', 'signed', 'int', 'char', 'short', 'long', 'float', 'double',
    'void', '_Bool', 'bool', 'struct', 'union', 'enum', 'size_t',
    'uintptr_t', 'inline',
}
JUMP_WORDS = {'return', 'break', 'continue', 'goto'}
TOKEN_RE = re.compile(r'''
    (?P<ws>[ \t\r\f\v]+|\n)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<str>"(?:\\.|[^"\\\n])*")
  | (?P<chr>'(?:\\.|[^'\\\n])*')
  | (?P<num>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.])*)
  | (?P<id>[A-Za-z_][A-Za-z_0-9]*)
''', re.S | re.X)


class Token:
    __slots__ = ('kind', 'text', 'start', 'end', 'line')

    def __init__(self, kind, text, start, end, line):
        self.kind, self.text, self.start, self.end, self.line = (
            kind, text, start, end, line)

    def __repr__(self):
        return 'Token(%s %r @%d)' % (self.kind, self.text, self.line)


def tokenize(text):
    """Tokens of `text` outside comments and preprocessor lines."""
    toks = []
    i, line, n = 0, 1, len(text)
    at_line_start = True
    while i < n:
        if at_line_start:
            m = re.compile(r'[ \t]*#').match(text, i)
            if m:
                # A directive runs to the first newline not escaped by '\'.
                j = i
                while True:
                    k = text.find('\n', j)
                    if k < 0:
                        k = n
                        break
                    if text[k - 1] != '\\':
                        break
                    line += 1
                    j = k + 1
                i = k
                continue
        m = TOKEN_RE.match(text, i)
        if m:
            kind = m.lastgroup
            s = m.group()
            if kind == 'ws':
                if s == '\n':
                    line += 1
                    at_line_start = True
                i = m.end()
                continue
            if kind == 'comment':
                line += s.count('\n')
                i = m.end()
                continue
            toks.append(Token(kind, s, i, m.end(), line))
            at_line_start = False
            i = m.end()
            continue
        for p in PUNCTUATORS:
            if text.startswith(p, i):
                toks.append(Token('punct', p, i, i + len(p), line))
                at_line_start = False
                i += len(p)
                break
        else:
            raise ValueError('line %d: cannot tokenize %r' % (line, text[i]))
    return toks


OPEN = {'(': ')', '[': ']', '{': '}'}


def match(toks, i):
    """Index of the bracket closing toks[i]."""
    want, depth = [], 0
    for j in range(i, len(toks)):
        t = toks[j].text
        if t in OPEN:
            want.append(OPEN[t])
        elif want and t == want[-1]:
            want.pop()
            if not want:
                return j
        elif t in (')', ']', '}'):
            raise ValueError('line %d: unbalanced %r' % (toks[j].line, t))
    raise ValueError('line %d: %r never closed' % (toks[i].line, toks[i].text))


class Stmt:
    """One statement: kind, tokens [first, last], condition [cfirst, clast)."""

    def __init__(self, kind, first, last, func, cond=None):
        self.kind, self.first, self.last, self.func = kind, first, last, func
        self.cond = cond  # (first, end) token indices, end exclusive

    def __repr__(self):
        return 'Stmt(%s %d..%d in %s)' % (self.kind, self.first, self.last,
                                         self.func)


class Function:
    def __init__(self, name, body_first, body_last):
        self.name, self.body_first, self.body_last = name, body_first, body_last
        self.stmts = []


class Scan:
    """Every function of one source file and every statement in each."""

    def __init__(self, text):
        self.text = text
        self.toks = tokenize(text)
        self.functions = []
        self._top_level()

    # -- top level ----------------------------------------------------------
    def _top_level(self):
        toks, i = self.toks, 0
        while i < len(toks):
            t = toks[i].text
            if t == '{':
                end = match(toks, i)
                if i > 0 and toks[i - 1].text == ')':
                    name = self._function_name(i - 1)
                    f = Function(name, i, end)
                    self.functions.append(f)
                    self._block(i, f)
                i = end + 1
            elif t in OPEN:
                i = match(toks, i) + 1
            else:
                i += 1

    def _function_name(self, close):
        depth = 0
        for j in range(close, -1, -1):
            t = self.toks[j].text
            if t == ')':
                depth += 1
            elif t == '(':
                depth -= 1
                if depth == 0:
                    return self.toks[j - 1].text if j > 0 else '?'
        return '?'

    # -- statements ---------------------------------------------------------
    def _block(self, i, f):
        """toks[i] is '{'; scan to its '}'; return the index after it."""
        end = match(self.toks, i)
        j = i + 1
        while j < end:
            j = self._stmt(j, f)
        return end + 1

    def _paren(self, i):
        if self.toks[i].text != '(':
            raise ValueError('line %d: expected (' % self.toks[i].line)
        return match(self.toks, i)

    def _to_semicolon(self, i):
        toks = self.toks
        j = i
        while toks[j].text != ';':
            if toks[j].text in OPEN:
                j = match(toks, j)
            j += 1
        return j

    def _stmt(self, i, f):
        toks = self.toks
        t = toks[i].text
        add = f.stmts.append
        if t == '{':
            end = match(toks, i)
            add(Stmt('block', i, end, f.name))
            return self._block(i, f)
        if t == ';':
            add(Stmt('empty', i, i, f.name))
            return i + 1
        if t in ('if', 'while', 'switch'):
            close = self._paren(i + 1)
            s = Stmt(t, i, close, f.name, (i + 2, close))
            add(s)
            j = self._stmt(close + 1, f)
            if t == 'if' and j < len(toks) and toks[j].text == 'else':
                j = self._stmt(j + 1, f)
            s.last = j - 1
            return j
        if t == 'for':
            close = self._paren(i + 1)
            semis = [k for k in range(i + 2, close) if toks[k].text == ';' and
                     self._depth_ok(i + 2, k)]
            cond = (semis[0] + 1, semis[1]) if len(semis) == 2 else None
            s = Stmt('for', i, close, f.name, cond)
            add(s)
            j = self._stmt(close + 1, f)
            s.last = j - 1
            return j
        if t == 'do':
            s = Stmt('do', i, i, f.name)
            add(s)
            j = self._stmt(i + 1, f)
            if toks[j].text != 'while':
                raise ValueError('line %d: do without while' % toks[j].line)
            close = self._paren(j + 1)
            s.cond = (j + 2, close)
            s.last = close + 1
            return close + 2
        if t in ('case', 'default'):
            j = i
            while toks[j].text != ':':
                j += 1
            add(Stmt('label', i, j, f.name))
            return j + 1
        if (toks[i].kind == 'id' and i + 1 < len(toks) and
                toks[i + 1].text == ':'):
            add(Stmt('label', i, i + 1, f.name))
            return i + 2
        j = self._to_semicolon(i)
        if t in JUMP_WORDS:
            kind = 'jump'
        elif self._is_declaration(i):
            kind = 'decl'
        else:
            kind = 'expr'
        add(Stmt(kind, i, j, f.name))
        return j + 1

    def _depth_ok(self, first, k):
        depth = 0
        for j in range(first, k):
            t = self.toks[j].text
            if t in OPEN:
                depth += 1
            elif t in (')', ']', '}'):
                depth -= 1
        return depth == 0

    def _is_declaration(self, i):
        toks = self.toks
        a = toks[i]
        if a.text in TYPE_WORDS:
            return True
        if a.kind != 'id':
            return False
        b = toks[i + 1]
        if b.kind == 'id':
            return True
        if b.text == '*':
            j = i + 1
            while toks[j].text == '*':
                j += 1
            if toks[j].kind == 'id' and toks[j].text != 'const' and \
                    toks[j + 1].text in ('=', ';', ',', '['):
                return True
            if toks[j].text == 'const':
                return True
        return False

    # -- queries ------------------------------------------------------------
    def function_at(self, tok_index):
        for f in self.functions:
            if f.body_first <= tok_index <= f.body_last:
                return f
        return None

    def call_spans(self, names):
        """(first, last) token spans of calls to any of `names`."""
        spans = []
        toks = self.toks
        for i, t in enumerate(toks):
            if t.kind == 'id' and t.text in names and i + 1 < len(toks) and \
                    toks[i + 1].text == '(':
                spans.append((i, match(toks, i + 1)))
        return spans

    def line_text(self, first_line, last_line):
        """The physical lines first_line..last_line, whitespace squeezed."""
        lines = self.text.split('\n')[first_line - 1:last_line]
        return ' '.join(' '.join(l.split()) for l in lines)
