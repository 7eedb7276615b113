#!/bin/sh
# tests/install/man_flags.sh TOOL PAGE [COMMAND...] - TOOL's man page PAGE
# (as the build generated it, the file that installs) lists exactly the
# flags that `TOOL --help` lists, and so does each COMMAND's subsection
# against `TOOL COMMAND --help`; and man(1) renders PAGE without a warning
# (what lintian's manpage checks run).  Exits 1, naming the flags that
# differ, when the page and --help have drifted apart.
set -eu
tool=$1
page=$2
shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
export ASAN_OPTIONS
fail() {
    echo "man_flags: $*" >&2
    exit 1
}
# --help: the flag column of the lines after "flags:" ("  -h, --help ...",
# "      --port P ..."; a wrapped help line is indented further), one
# --name per line.
help_flags() {
    awk '/^flags:$/ { f = 1; next }
         f && /^  (-[^-], |    )--[a-z0-9]/ {
             for (i = 1; i <= NF; i++)
                 if ($i ~ /^--[a-z0-9]/) { print $i; break }
         }' | sort
}
# The page: the .TP entries' \fB\-\-name\fR, as man renders them, per
# section (the main OPTIONS, or the .SS of one command).
page_flags() {
    awk -v want="$1" '
        /^\.SS / {
            sec = $0; sub(/^\.SS "?/, "", sec); sub(/"$/, "", sec)
            gsub(/\\-/, "-", sec)
        }
        /^\.SH / { sec = ($0 == ".SH OPTIONS") ? "" : "-" }
        tp && sec == want {
            n = split($0, part, /\\fR/)
            for (i = 1; i <= n; i++)
                if (part[i] ~ /\\fB\\-\\-/) {
                    f = part[i]
                    sub(/.*\\fB/, "", f)
                    gsub(/\\-/, "-", f)
                    print f
                }
        }
        { tp = ($0 == ".TP") }' "$page" | sort
}
compare() {
    if ! diff -u "$1" "$2" >"$tmp/diff"; then
        cat "$tmp/diff" >&2
        fail "$3: the man page and --help list different flags (- help, + man)"
    fi
    [ -s "$1" ] || fail "$3: no flag found in --help"
}
[ -s "$page" ] || fail "no page $page"
"$tool" --help | help_flags >"$tmp/help"
page_flags "" >"$tmp/man"
compare "$tmp/help" "$tmp/man" "$(basename "$tool")"
for c in "$@"; do
    "$tool" "$c" --help | help_flags >"$tmp/help"
    page_flags "$(basename "$tool") $c" >"$tmp/man"
    compare "$tmp/help" "$tmp/man" "$(basename "$tool") $c"
done
# Rendered as lintian renders it: every groff warning is a failure.
if command -v man >/dev/null 2>&1; then
    LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 \
        man --warnings -E UTF-8 -l -Tutf8 -Z "$page" >/dev/null 2>"$tmp/warn" ||
        true
    if [ -s "$tmp/warn" ]; then
        cat "$tmp/warn" >&2
        fail "$page: man reports warnings"
    fi
fi
echo "man_flags: $(basename "$page"): $(wc -l <"$tmp/help") flags, same as --help"
