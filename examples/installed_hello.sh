#!/bin/sh
# examples/installed_hello.sh BUILD_DIR HELLO_C - a newcomer's first build.
#
# Installs the build into a temporary folder (meson install --destdir) and
# checks what a user of that installation meets (issue 29 items 3 and 6):
#
# 1. `pkg-config --cflags xfer` holds the installation's include folder
#    and what the public headers need (libevent's flags), nothing else: no
#    -I/usr/include/libnl3 from the RDMA libraries' private requirements.
# 2. The installed programs and the Python extension run as installed:
#    with no LD_LIBRARY_PATH, ldd resolves their libxfer.so.0 to the one
#    in the temporary folder (their $ORIGIN rpath follows the tree where
#    it was moved), and xferd, xfer-trace and the other tools answer
#    --version.
# 3. HELLO_C compiles against that installation with nothing but the
#    flags of `pkg-config --cflags --libs xfer` (its prefix moved to the
#    temporary folder with --define-variable), runs with the installed
#    shared library, and prints what run_hello.sh checks.
# 4. The same with the build tree's xfer-uninstalled.pc, whose Cflags must
#    reach the source tree's include folder.
#
# CC names the compiler (default cc); PYTHON, when set, the interpreter the
# binding was built for (then the installed package is imported too).
set -eu
build=$(cd "$1" && pwd)
src=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# What is checked is that nothing needs it.
unset LD_LIBRARY_PATH
fail() {
    echo "installed_hello: $*" >&2
    exit 1
}
if ! meson install -C "$build" --no-rebuild --destdir "$tmp" \
        >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    fail "meson install failed"
fi
pc=$(find "$tmp" -name xfer.pc)
[ -n "$pc" ] || fail "no xfer.pc was installed"
prefix=$(sed -n 's/^prefix=//p' "$pc")
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH

# 1. Cflags: the include folder and libevent's, as written in the .pc file
# (not moved: --define-variable would move libevent's prefix as well).
cflags=$(pkg-config --cflags xfer)
echo "pkg-config --cflags xfer: $cflags"
case "$cflags" in
*libnl*) fail "Cflags name libnl: $cflags" ;;
esac
allowed=" -I$(pkg-config --variable=includedir xfer) $(pkg-config --cflags libevent_core libevent_extra) "
for f in $cflags; do
    case "$allowed" in
    *" $f "*) ;;
    *) fail "Cflags hold $f, which no public header needs" ;;
    esac
done

# 2. The installed programs, as installed.
bindir="$tmp$prefix/bin"
[ -x "$bindir/xferd" ] || fail "no xferd in $bindir"
# resolves FILE: FILE's libxfer.so.0 is the installed one; every library
# it needs is found.
resolves() {
    ldd "$1" >"$tmp/ldd.out" 2>&1 || true
    if grep -q 'not found' "$tmp/ldd.out" ||
        ! grep -q "libxfer\.so\.0 => $tmp" "$tmp/ldd.out"; then
        cat "$tmp/ldd.out" >&2
        fail "$1 does not load the installed libxfer without LD_LIBRARY_PATH"
    fi
}
for prog in xferd xfer-trace; do
    resolves "$bindir/$prog"
done
for prog in xferd xfer-trace xfer-check xfer-bench xfer-bench-tcp \
        xfer-bench-rdma xfer-demo; do
    [ -x "$bindir/$prog" ] || fail "no $prog in $bindir"
    # Those that link libxfer.so must find the installed one.
    if ldd "$bindir/$prog" | grep -q libxfer; then
        resolves "$bindir/$prog"
    fi
    out=$("$bindir/$prog" --version) || fail "$prog --version failed"
    [ "$out" = "$prog $(sed -n 's/^Version: //p' "$pc")" ] ||
        fail "$prog --version said '$out'"
done
ext=$(find "$tmp" -name '_xfer*.so')
if [ -n "$ext" ]; then
    resolves "$ext"
    if [ -n "${PYTHON:-}" ]; then
        PYTHONPATH=$(dirname "$(dirname "$ext")") "$PYTHON" -c \
            'import xfer, sys; sys.stdout.write(xfer.__file__ + "\n")' \
            >"$tmp/py.out" || fail "the installed package does not import"
        grep -q "^$tmp" "$tmp/py.out" ||
            fail "imported $(cat "$tmp/py.out"), not the installed package"
    fi
fi

# 3. hello against the installation.
pc_xfer() {
    pkg-config --define-variable=prefix="$tmp$prefix" "$@" xfer
}
flags=$(pc_xfer --cflags --libs)
echo "pkg-config --cflags --libs xfer: $flags"
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/hello" "$src" \
    $flags
# A program of the user's own has no rpath: the library folder is named
# here (ldconfig's job in a system prefix, docs/design.md section 12).
if ! LD_LIBRARY_PATH=$(pc_xfer --variable=libdir) ldd "$tmp/hello" |
        grep -q "$tmp.*libxfer"; then
    LD_LIBRARY_PATH=$(pc_xfer --variable=libdir) ldd "$tmp/hello" >&2
    fail "hello does not load the installed libxfer"
fi
LD_LIBRARY_PATH=$(pc_xfer --variable=libdir) "$here/run_hello.sh" "$tmp/hello"

# 4. hello against the build tree (xfer-uninstalled.pc).
upc="$build/meson-uninstalled/xfer-uninstalled.pc"
[ -f "$upc" ] || fail "no $upc"
uflags=$(PKG_CONFIG_PATH="$build/meson-uninstalled" \
    pkg-config --cflags --libs xfer-uninstalled)
echo "pkg-config --cflags --libs xfer-uninstalled: $uflags"
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/hello-uninst" \
    "$src" $uflags ||
    fail "hello does not compile with xfer-uninstalled.pc's flags"
LD_LIBRARY_PATH=$build "$here/run_hello.sh" "$tmp/hello-uninst"
