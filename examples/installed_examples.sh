#!/bin/sh
# examples/installed_examples.sh BUILD_DIR EXAMPLES_DIR - every C example
# of the documentation as a newcomer builds it (issue 23): the build installed
# into a temporary folder (meson install --destdir), then hello.c,
# server.c, consumer.c and producer.c each compiled against that
# installation with nothing but `pkg-config --cflags --libs xfer` (its
# prefix moved to the temporary folder with --define-variable), and run
# with the installed shared library: hello as run_hello.sh checks it, the
# other three as the quick start's deployment (run_tcp.sh), which passes only
# when both workers end holding nothing.  CC names the compiler.
set -eu
build=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! meson install -C "$build" --no-rebuild --destdir "$tmp" \
        >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "installed_examples: meson install failed" >&2
    exit 1
fi
pc=$(find "$tmp" -name xfer.pc)
if [ -z "$pc" ]; then
    echo "installed_examples: no xfer.pc was installed" >&2
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
LD_LIBRARY_PATH=$(pc_xfer --variable=libdir)
export LD_LIBRARY_PATH
for ex in hello server consumer producer; do
    # shellcheck disable=SC2086 # the flags are words
    ${CC:-cc} -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/$ex" \
        "$src/$ex.c" $flags
    if ! ldd "$tmp/$ex" | grep -q "$tmp.*libxfer"; then
        ldd "$tmp/$ex" >&2
        echo "installed_examples: $ex does not load the installed libxfer" >&2
        exit 1
    fi
done
"$here/run_hello.sh" "$tmp/hello"
"$here/run_tcp.sh" "$tmp/server" "$tmp/consumer" "$tmp/producer"
echo "installed_examples: hello, server, consumer and producer built from" \
     "the installed headers and library, run, every worker empty"
