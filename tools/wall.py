#!/usr/bin/env python3
"""
tools/wall.py - the walls between the layers of xfer, checked while the
library is built.

A walled layer's static library is built from the C file this script
writes, so a layer that breaks its wall does not build (meson runs it as
a custom_target; see fsm/meson.build and transport/meson.build):

  fsm        the pure core.  Its sources and every header they reach may
             include only the libc headers in PURE_HEADERS (no stdio, time,
             threads, sockets or signals), include/xfer/ and fsm/'s own
             headers.  Its objects may refer only to symbols that fsm/
             defines itself, to the libc calls in PURE_CALLS, and to what
             compilers and sanitizers add (TOOLCHAIN_*); util.c, the libc
             default of the injected allocator, is the one object that may
             call malloc and free.
  transport  the drivers with I/O.  Its sources may include libc and POSIX
             headers (SYSTEM_HEADERS), libevent, rdma-core and libcrypto
             (SYSTEM_PREFIXES), include/xfer/, transport/'s own headers and
             fsm/'s private headers; never a header of tools/ or tests/.

Every .c and .h file in the layer's folder must be among the files meson
passes in, so nothing escapes the check by not being listed.  A quoted
include is looked up where the compiler would (the including file's
folder, then the layer's include folders); one that resolves inside the
repository must stay inside the layer's allowed folders and is checked in
turn, one that does not is taken as a system header.  Includes are read
after comments are removed, under every #if branch (the wall is
conservative); an include the wall cannot read (#include MACRO) is refused.

Usage (meson):
  wall.py LAYER --root SRCROOT --out OUT.c --depfile OUT.d
          [--nm NM --archive LIB.a] FILE...

Exit 0 with OUT.c written when the wall holds; otherwise one line per
breach on stderr and exit 1.
"""
import argparse
import os
import re
import subprocess
import sys

# C11 headers a pure core may use: types, limits, assert, and the pure
# parts of <string.h> and <stdlib.h> (PURE_CALLS says which calls).
PURE_HEADERS = {
    'assert.h', 'float.h', 'inttypes.h', 'iso646.h', 'limits.h',
    'stdalign.h', 'stdarg.h', 'stdbool.h', 'stddef.h', 'stdint.h',
    'stdlib.h', 'stdnoreturn.h', 'string.h',
}

# Calls into libc an fsm object may make: memory and string primitives,
# sorting and searching with a caller's comparator, assert's helper.
PURE_CALLS = {
    'memchr', 'memcmp', 'memcpy', 'memmove', 'memset',
    'strchr', 'strcmp', 'strcspn', 'strlen', 'strncmp', 'strnlen',
    'strpbrk', 'strrchr', 'strspn', 'strstr',
    'qsort', 'bsearch',
    '__assert_fail',
}

# Per object: the injected allocator's libc default lives in util.c.
OBJECT_CALLS = {
    'util.c': {'malloc', 'free'},
}

# What compilers, hardening and sanitizers add to an object by themselves.
TOOLCHAIN_NAMES = {
    '_GLOBAL_OFFSET_TABLE_', '__stack_chk_fail', '__stack_chk_guard',
    '__fentry__', 'mcount', '_mcount',
}
TOOLCHAIN_PREFIXES = (
    '__asan_', '__ubsan_', '__lsan_', '__msan_', '__tsan_', '__hwasan_',
    '__sanitizer_', '__sancov_', '__gcov_', '__llvm_',
)
# _FORTIFY_SOURCE variants of the allowed calls (__memcpy_chk, ...) and
# libgcc's arithmetic helpers on narrow targets (__udivdi3, ...).
TOOLCHAIN_PATTERNS = (
    re.compile(r'^__(mem|str)[a-z]*_chk$'),
    re.compile(r'^__(u?(div|mod)|mul|ashl|ashr|lshr|popcount|clz|ctz|ffs'
               r'|parity|bswap)[sdt]i[23]$'),
)

# C11 and POSIX.1-2008 headers, and the Linux ones the transports use.
SYSTEM_HEADERS = PURE_HEADERS | {
    'complex.h', 'ctype.h', 'errno.h', 'fenv.h', 'locale.h', 'math.h',
    'setjmp.h', 'signal.h', 'stdatomic.h', 'stdio.h', 'tgmath.h',
    'threads.h', 'time.h', 'uchar.h', 'wchar.h', 'wctype.h',
    'aio.h', 'arpa/inet.h', 'dirent.h', 'dlfcn.h', 'fcntl.h', 'fnmatch.h',
    'glob.h', 'grp.h', 'ifaddrs.h', 'langinfo.h', 'libgen.h', 'net/if.h',
    'netdb.h', 'netinet/in.h', 'netinet/tcp.h', 'poll.h', 'pthread.h',
    'pwd.h', 'regex.h', 'sched.h', 'semaphore.h', 'spawn.h', 'strings.h',
    'sys/epoll.h', 'sys/eventfd.h', 'sys/ioctl.h', 'sys/mman.h',
    'sys/prctl.h', 'sys/resource.h', 'sys/select.h', 'sys/socket.h',
    'sys/stat.h', 'sys/statvfs.h', 'sys/syscall.h', 'sys/time.h',
    'sys/types.h', 'sys/uio.h', 'sys/un.h', 'sys/utsname.h', 'sys/wait.h',
    'syslog.h', 'termios.h', 'unistd.h', 'endian.h',
}
# libevent, rdma-core (verbs, rdmacm), libcrypto/libssl, ISA-L (CRC32C) and
# json-c (the directory client, transport/dir*.c).
SYSTEM_PREFIXES = ('event2/', 'infiniband/', 'rdma/', 'openssl/', 'isa-l/',
                   'json-c/')

# Per layer: its folder, the folders a quoted include is looked up in
# (after the including file's own), the folders an include may reach, and
# the system headers it may use.
LAYERS = {
    'fsm': {
        'dir': 'fsm',
        'search': ['include', 'fsm'],
        'reach': ['include/xfer', 'fsm'],
        'headers': PURE_HEADERS,
        'prefixes': (),
        'symbols': True,
        'rule': 'fsm/ may include only pure libc headers (%s), '
                'include/xfer/ and its own headers'
                % ', '.join(sorted(PURE_HEADERS)),
    },
    'transport': {
        'dir': 'transport',
        'search': ['include', 'transport', 'fsm'],
        'reach': ['include/xfer', 'transport', 'fsm'],
        'headers': SYSTEM_HEADERS,
        'prefixes': SYSTEM_PREFIXES,
        'symbols': False,
        'rule': 'transport/ may include libc/POSIX, libevent, rdma-core, '
                'libcrypto and ISA-L headers, include/xfer/, its own headers and '
                "fsm/'s private headers; never tools/ or tests/",
    },
}

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(.*)$')


def strip_comments(text):
    """The text with comments blanked (newlines kept, so line numbers hold)
    and string/char literals left as they are."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(''.join('\n' if ch == '\n' else ' '
                               for ch in text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def includes(path):
    """(line, kind, name) for every #include of a file; kind is '<', '"'
    or '?' (computed)."""
    with open(path, encoding='utf-8', errors='replace') as f:
        text = strip_comments(f.read())
    for lineno, line in enumerate(text.split('\n'), 1):
        m = INCLUDE_RE.match(line)
        if not m:
            continue
        arg = m.group(1).strip()
        q = re.match(r'^"([^"]+)"', arg) or re.match(r'^<([^>]+)>', arg)
        if q:
            yield lineno, arg[0], q.group(1)
        else:
            yield lineno, '?', arg


def inside(path, folder):
    return os.path.commonpath([path, folder]) == folder


class Wall:
    def __init__(self, layer, root):
        self.spec = LAYERS[layer]
        self.root = os.path.realpath(root)
        self.search = [os.path.join(self.root, d) for d in self.spec['search']]
        self.reach = [os.path.join(self.root, d) for d in self.spec['reach']]
        self.seen = set()
        self.breaches = []

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def breach(self, where, what):
        self.breaches.append('%s: %s' % (where, what))

    def resolve(self, including, name):
        for d in [os.path.dirname(including)] + self.search:
            p = os.path.realpath(os.path.join(d, name))
            if os.path.isfile(p):
                return p
        return None

    def system_ok(self, name):
        return (name in self.spec['headers'] or
                name.startswith(self.spec['prefixes']))

    def check_file(self, path, via=None):
        path = os.path.realpath(path)
        if path in self.seen:
            return
        self.seen.add(path)
        for lineno, kind, name in includes(path):
            where = '%s:%d' % (self.rel(path), lineno)
            if via:
                where += ' (reached from %s)' % self.rel(via)
            if kind == '?':
                self.breach(where, '#include %s: a computed include cannot '
                            'be checked; %s' % (name, self.spec['rule']))
                continue
            found = None
            if kind == '"' or name.startswith('xfer/'):
                found = self.resolve(path, name)
            if found and inside(found, self.root):
                if not any(inside(found, d) for d in self.reach):
                    self.breach(where, 'includes %s%s%s (%s): %s' % (
                        kind, name, '"' if kind == '"' else '>',
                        self.rel(found), self.spec['rule']))
                    continue
                self.check_file(found, via or path)
            elif not self.system_ok(name):
                self.breach(where, 'includes %s%s%s: %s' % (
                    kind, name, '"' if kind == '"' else '>',
                    self.spec['rule']))

    def check_listed(self, files):
        """Every .c/.h of the layer's folder is among the files given."""
        given = {os.path.realpath(f) for f in files}
        folder = os.path.join(self.root, self.spec['dir'])
        for name in sorted(os.listdir(folder)):
            p = os.path.realpath(os.path.join(folder, name))
            if name.endswith(('.c', '.h')) and p not in given:
                self.breach(self.rel(p), 'not listed in %s/meson.build, so '
                            'the wall would not check it'
                            % self.spec['dir'])

    def check_symbols(self, nm, archive):
        """Undefined symbols of every object of the archive."""
        out = subprocess.run([nm, '-P', '-A', archive], check=True,
                             capture_output=True, text=True).stdout
        defined, undefined = set(), []
        for line in out.splitlines():
            head, _, rest = line.partition(': ')
            f = rest.split()
            if len(f) < 2:
                continue
            member = re.sub(r'^.*\[(.*)\]$', r'\1', head)
            obj = os.path.basename(member)
            name, typ = f[0], f[1]
            if typ == 'U' or typ in 'wv':  # undefined, or weak undefined
                undefined.append((obj, name))
            elif typ.isupper():  # a global (or weak, W/V) definition
                defined.add(name)
        for obj, name in undefined:
            src = obj[:-2] if obj.endswith('.o') else obj
            if (name in defined or name in PURE_CALLS or
                    name in OBJECT_CALLS.get(src, ()) or
                    name in TOOLCHAIN_NAMES or
                    name.startswith(TOOLCHAIN_PREFIXES) or
                    any(p.match(name) for p in TOOLCHAIN_PATTERNS)):
                continue
            self.breach('%s/%s' % (self.spec['dir'], src),
                        'calls %s: fsm/ objects may call only %s%s, and '
                        'each other' % (
                            name, ', '.join(sorted(PURE_CALLS)),
                            ''.join('; %s also %s' % (k, ', '.join(sorted(v)))
                                    for k, v in sorted(OBJECT_CALLS.items()))))


def main():
    ap = argparse.ArgumentParser(description='check the wall of a layer')
    ap.add_argument('layer', choices=sorted(LAYERS))
    ap.add_argument('--root', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--depfile', required=True)
    ap.add_argument('--nm')
    ap.add_argument('--archive')
    ap.add_argument('files', nargs='+')
    a = ap.parse_args()

    w = Wall(a.layer, a.root)
    w.check_listed(a.files)
    for f in a.files:
        w.check_file(f)
    if w.spec['symbols']:
        if not (a.nm and a.archive):
            ap.error('layer %s needs --nm and --archive' % a.layer)
        w.check_symbols(a.nm, a.archive)

    if w.breaches:
        print('wall: %s/ breaks its wall (tools/wall.py):' % w.spec['dir'],
              file=sys.stderr)
        for b in w.breaches:
            print('  ' + b, file=sys.stderr)
        return 1
    deps = sorted(w.seen)
    with open(a.depfile, 'w', encoding='utf-8') as f:
        f.write('%s: %s\n' % (a.out.replace(' ', '\\ '),
                              ' '.join(d.replace(' ', '\\ ') for d in deps)))
    what = ('includes and undefined symbols' if w.spec['symbols']
            else 'includes')
    with open(a.out, 'w', encoding='utf-8') as f:
        f.write('/* Generated by tools/wall.py: the %s wall held for %d '
                'files (%s).\n * The library is built from this file, so '
                'it cannot be built\n * without the check. */\n'
                'typedef int xfer_wall_%s_held;\n'
                % (a.layer, len(deps), what, a.layer))
    return 0


if __name__ == '__main__':
    sys.exit(main())
