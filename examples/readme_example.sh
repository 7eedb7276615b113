#!/bin/sh
# examples/readme_example.sh PAGE FILE - the page PAGE shows FILE (an
# examples/ program) whole: the C block after the line
# "<!-- examples/NAME, verbatim -->" must be FILE, byte for byte.  Prints
# the difference and exits 1 when they have drifted apart.
# (examples/docs_blocks.py checks every block of
# README.md and docs/*.md, this one included; this script stays for a test
# that names one page and one file.)
set -eu
name=$(basename "$2")
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk -v marker="<!-- examples/$name, verbatim -->" '
    $0 == marker { marked = 1; next }
    marked && !inside && /^```c$/ { inside = 1; next }
    inside && /^```$/ { exit }
    inside { print }
' "$1" >"$tmp"
if [ ! -s "$tmp" ]; then
    echo "readme_example: no verbatim copy of $name in $1" >&2
    exit 1
fi
if ! diff -u "$2" "$tmp"; then
    echo "readme_example: the README's copy of $name differs from $2" >&2
    exit 1
fi
