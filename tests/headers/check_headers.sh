#!/bin/sh
# Compile every public header alone, as C11 with -pedantic -Werror and as
# C++, so each one carries its own includes and stays C++-clean.
# Usage: check_headers.sh INCLUDE_DIR CC CXX
set -u
inc=$1; cc=${2:-cc}; cxx=${3:-c++}
pass=0; fail=0
for h in "$inc"/xfer/*.h; do
    name=xfer/$(basename "$h")
    if printf '#include "%s"\nint xfer_header_probe_;\n' "$name" |
        "$cc" -std=c11 -pedantic -Werror -Wall -Wextra -fsyntax-only \
            -I"$inc" -x c - ; then
        pass=$((pass + 1))
    else
        echo "FAIL: $name does not compile alone as C11"; fail=$((fail + 1))
    fi
    if command -v "$cxx" >/dev/null 2>&1; then
        if printf '#include "%s"\nint xfer_header_probe_;\n' "$name" |
            "$cxx" -std=c++11 -pedantic -Werror -Wall -Wextra -fsyntax-only \
                -I"$inc" -x c++ - ; then
            pass=$((pass + 1))
        else
            echo "FAIL: $name does not compile alone as C++"
            fail=$((fail + 1))
        fi
    fi
done
echo "headers: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
