#!/bin/sh
# examples/installed_hello.sh BUILD_DIR HELLO_C - a newcomer's first build.
#
# Installs the build into a temporary folder (meson install --destdir),
# compiles HELLO_C against that installation with nothing but the flags of
# `pkg-config --cflags --libs xfer` (its prefix moved to the temporary
# folder with --define-variable, since nothing is installed for real), runs
# it with the installed shared library, and checks its output as
# run_hello.sh does.  CC names the compiler (default cc).
set -eu
build=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! meson install -C "$build" --no-rebuild --destdir "$tmp" \
        >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "installed_hello: meson install failed" >&2
    exit 1
fi
pc=$(find "$tmp" -name xfer.pc)
if [ -z "$pc" ]; then
    echo "installed_hello: no xfer.pc was installed" >&2
    exit 1
fi
prefix=$(sed -n 's/^prefix=//p' "$pc")
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
pc_xfer() {
    pkg-config --define-variable=prefix="$tmp$prefix" "$@" xfer
}
flags=$(pc_xfer --cflags --libs)
echo "pkg-config --cflags --libs xfer: $flags"
# shellcheck disable=SC2086 # the flags are words
${CC:-cc} -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/hello" "$src" \
    $flags
LD_LIBRARY_PATH=$(pc_xfer --variable=libdir)
export LD_LIBRARY_PATH
if ! ldd "$tmp/hello" | grep -q "$tmp.*libxfer"; then
    ldd "$tmp/hello" >&2
    echo "installed_hello: hello does not load the installed libxfer" >&2
    exit 1
fi
"$here/run_hello.sh" "$tmp/hello"
