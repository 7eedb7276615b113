#!/usr/bin/env python3
"""
tests/walls/test_walls.py - the walls of fsm/ and transport/ hold: the
build of a copy of the tree fails when one file breaks a wall, and passes
when the file is put back.

The copy is configured like any checkout (meson setup, tests off) and only
the two walled libraries are built, so this runs the real build step
(tools/wall.py as a custom_target the library needs), not a stand-in.
Each breach is one small edit: an fsm source that includes libevent, one
that calls printf (declared by hand, so only the symbol check can catch
it), one that calls malloc outside util.c, an fsm header that includes
stdio, and a transport source that includes a tools/ header.  Each must
fail the build with the wall's message naming the file and what it did.

Usage: test_walls.py --src ROOT --work DIR --meson MESON --ninja NINJA
                     [--cc CC]
"""
import argparse
import os
import shutil
import subprocess
import sys

FSM = 'fsm/libxfer_fsm.a'
TRANSPORT = 'transport/libxfer_transport.a'

PRINTF_PROBE = '''
int xfer_heap_wall_probe(int x);
int xfer_heap_wall_probe(int x)
{
    extern int printf(const char *, ...);
    return printf("%d", x);
}
'''
MALLOC_PROBE = '''
#include <stdlib.h>
void *xfer_heap_wall_probe(unsigned n);
void *xfer_heap_wall_probe(unsigned n)
{
    return malloc(n);
}
'''


def after_first(line):
    """An edit that inserts `line` after the file's first #include."""
    def edit(text):
        i = text.index('#include')
        j = text.index('\n', i) + 1
        return text[:j] + line + '\n' + text[j:]
    return edit


def append(code):
    return lambda text: text + code


# name, file, edit, target, what the failure must say
BREACHES = [
    ('fsm source includes libevent', 'fsm/heap.c',
     after_first('#include <event2/event.h>'), FSM,
     ['fsm/heap.c:', '<event2/event.h>']),
    ('fsm source calls printf', 'fsm/heap.c', append(PRINTF_PROBE), FSM,
     ['fsm/heap.c', 'calls printf']),
    ('fsm source calls malloc outside util.c', 'fsm/heap.c',
     append(MALLOC_PROBE), FSM, ['fsm/heap.c', 'calls malloc']),
    ('fsm header includes stdio', 'fsm/util.h',
     after_first('#include <stdio.h>'), FSM, ['fsm/util.h:', '<stdio.h>']),
    ('transport source includes a tools/ header', 'transport/wire.c',
     after_first('#include "../tools/check/world.h"'), TRANSPORT,
     ['transport/wire.c:', 'tools/check/world.h']),
]


def is_build_dir(path):
    return (os.path.isdir(os.path.join(path, 'meson-private')) or
            os.path.isfile(os.path.join(path, 'build.ninja')))


def copy_tree(src, dst):
    """The source tree without git metadata and build folders."""
    def ignore(folder, names):
        return [n for n in names
                if n.startswith('.') or n == '__pycache__' or
                is_build_dir(os.path.join(folder, n))]
    shutil.copytree(src, dst, ignore=ignore)


def build(a, tree, targets):
    r = subprocess.run([a.ninja, '-C', os.path.join(tree, 'build'), '-j', '2']
                       + targets, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def fail(msg, out=''):
    print('FAIL: ' + msg)
    if out:
        print(out[-6000:])
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--src', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--meson', required=True)
    ap.add_argument('--ninja', required=True)
    ap.add_argument('--cc')
    a = ap.parse_args()

    shutil.rmtree(a.work, ignore_errors=True)
    tree = os.path.join(a.work, 'xfer')
    copy_tree(a.src, tree)
    env = dict(os.environ)
    if a.cc:
        env['CC'] = a.cc
    r = subprocess.run([a.meson, 'setup', os.path.join(tree, 'build'), tree,
                        '-Dtests=false', '-Dfuzz=disabled', '-Drdma=disabled',
                        '-Db_sanitize=none'],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env)
    if r.returncode != 0:
        fail('the copy does not configure', r.stdout)

    rc, out = build(a, tree, [FSM, TRANSPORT])
    if rc != 0:
        fail('the clean copy does not build its walled libraries', out)
    print('ok: the clean tree builds %s and %s' % (FSM, TRANSPORT))

    for name, rel, edit, target, says in BREACHES:
        path = os.path.join(tree, rel)
        with open(path, encoding='utf-8') as f:
            original = f.read()
        with open(path, 'w', encoding='utf-8') as f:
            f.write(edit(original))
        rc, out = build(a, tree, [target])
        with open(path, 'w', encoding='utf-8') as f:
            f.write(original)
        if rc == 0:
            fail('%s: the build passed' % name, out)
        missing = [s for s in ['breaks its wall'] + says if s not in out]
        if missing:
            fail('%s: the build failed, but not with the wall saying %s'
                 % (name, missing), out)
        print('ok: %s: the build fails' % name)

    rc, out = build(a, tree, [FSM, TRANSPORT])
    if rc != 0:
        fail('the restored copy does not build', out)
    print('ok: the restored tree builds again')
    shutil.rmtree(a.work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
