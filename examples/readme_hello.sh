#!/bin/sh
# examples/readme_hello.sh README HELLO_C - the README shows examples/hello.c
# whole: the C block after the line "<!-- examples/hello.c, verbatim -->"
# must be the file, byte for byte.  Prints the difference and exits 1 when
# they have drifted apart.
set -eu
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk '
    /^<!-- examples\/hello.c, verbatim -->$/ { marked = 1; next }
    marked && !inside && /^```c$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }
' "$1" >"$tmp"
if [ ! -s "$tmp" ]; then
    echo "readme_hello: no verbatim copy of hello.c in $1" >&2
    exit 1
fi
if ! diff -u "$2" "$tmp"; then
    echo "readme_hello: the README's copy of hello.c differs from $2" >&2
    exit 1
fi
