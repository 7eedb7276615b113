#!/bin/sh
# examples/deb_install.sh SRC WORK - docs/install.md's Debian recipe, run as
# written (issue 29 item 4): build the packages from the source tree SRC
# (copied into WORK/xfer-VERSION, where dpkg-buildpackage writes the .debs
# beside it), install them, and check what a user meets:
#
# 1. examples/hello.c builds with `pkg-config --cflags --libs xfer` alone
#    and runs (no LD_LIBRARY_PATH: the linker's cache finds libxfer);
# 2. a loop-transport transfer through the installed python3-xfer;
# 3. xferd and the tools run as installed and their man pages are there;
# 4. `systemd-analyze verify` accepts xferd@.service;
# 5. lintian reports no error or warning (overrides in debian/ say why).
#
# The packages are purged at the end, pass or fail, so the machine is as
# it was.  Needs root and XFER_SYSTEM_TESTS=1 (exit 77, skipped,
# otherwise: tools/run test sets it) and the build dependencies of
# debian/control (tools/run installs them).
set -eu
src=$(cd "$1" && pwd)
work=$2
[ "$(id -u)" -eq 0 ] || { echo "deb_install: needs root (dpkg -i)"; exit 77; }
# It installs packages into the system: only where asked to (tools/run
# test sets XFER_SYSTEM_TESTS=1), never from a casual `meson test`.
[ "${XFER_SYSTEM_TESTS:-0}" = 1 ] ||
    { echo "deb_install: set XFER_SYSTEM_TESTS=1 to run (tools/run test does)"; exit 77; }
unset LD_LIBRARY_PATH PYTHONPATH PKG_CONFIG_PATH
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
pkgs="python3-xfer xfer-tools libxfer-dev libxfer0"
for p in $pkgs; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q installed; then
        echo "deb_install: $p is installed already; not touching it (skipped)"
        exit 77
    fi
done
version=$(sed -n '1s/^xfer (\([^)]*\)).*/\1/p' "$src/debian/changelog")
stage="$work/xfer-$version"
rm -rf "$work"
mkdir -p "$stage"
# The source as the checkout has it (tracked and new files, no build
# folders), in a folder of its own: dpkg-buildpackage writes into ..
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    (cd "$src" && git ls-files -co --exclude-standard -z) |
        (cd "$src" && xargs -0 tar -cf - --no-recursion) | tar -xf - -C "$stage"
else
    (cd "$src" && tar -cf - --exclude='./build*' --exclude='./.mesonpy*' .) |
        tar -xf - -C "$stage"
fi
purge() {
    dpkg --purge $pkgs >"$work/purge.log" 2>&1 || cat "$work/purge.log" >&2
}
trap purge EXIT
t0=$(date +%s)

cd "$stage"
# -- build and install (docs/install.md shows these lines) --
DEB_BUILD_OPTIONS=nocheck dpkg-buildpackage -b -uc -us
cd ..
apt-get install -y --no-install-recommends ./libxfer0_*.deb ./libxfer-dev_*.deb ./xfer-tools_*.deb ./python3-xfer_*.deb
# -- end --
t1=$(date +%s)
echo "deb_install: built and installed in $((t1 - t0)) s"

tmp=$(mktemp -d)
trap 'purge; rm -rf "$tmp"' EXIT
# 1. hello, with pkg-config alone.
cd "$tmp"
cp "$src/examples/hello.c" .
# -- a program of your own (docs/install.md shows these lines) --
cc -o hello hello.c $(pkg-config --cflags --libs xfer)
./hello
# -- end --
"$src/examples/run_hello.sh" ./hello
# /lib is /usr/lib on a merged-/usr system.
if ldd ./hello | grep -Eq "libxfer.so.0 => (/usr)?/lib/"; then :; else
    ldd ./hello >&2
    echo "deb_install: hello does not load the system's libxfer" >&2
    exit 1
fi
case " $(pkg-config --cflags xfer) " in
*libnl*) echo "deb_install: Cflags name libnl" >&2; exit 1 ;;
esac

# 2. the Python package, from any folder, with no PYTHONPATH.
python3 "$src/examples/python/loop_transfer.py" | tee py.out
grep -q "^xfer /usr/lib/python3/dist-packages/xfer/__init__.py:" py.out
python3 -c 'import inspect, xfer; print(inspect.signature(xfer.Engine.submit))'

# 3. the tools as installed, with their man pages.
for prog in xferd xfer-trace xfer-check xfer-bench; do
    [ "$("$prog" --version)" = "$prog $version" ]
done
[ -f /usr/share/man/man8/xferd.8.gz ]
for page in xfer-trace xfer-check xfer-bench; do
    [ -f "/usr/share/man/man1/$page.1.gz" ]
done
! readelf -d /usr/bin/xferd | grep -Eq 'RPATH|RUNPATH'

# 4. the unit, as installed, loaded as an instance (systemd-analyze
# verifies a unit file named as the instance; the template file alone it
# cannot resolve without a running systemd).  Any message fails: an
# unknown or misspelt setting is only a warning to systemd.
[ -f /etc/xfer/example.conf ]
cp /lib/systemd/system/xferd@.service "$tmp/xferd@shard0.service"
if ! systemd-analyze verify --man=no "$tmp/xferd@shard0.service" \
        >"$tmp/verify.out" 2>&1 || [ -s "$tmp/verify.out" ]; then
    cat "$tmp/verify.out" >&2
    echo "deb_install: systemd-analyze verify rejects xferd@.service" >&2
    exit 1
fi

# 5. lintian, on the packages built.
lintian --fail-on error,warning --info "$work"/*.changes
echo "deb_install: ok ($(($(date +%s) - t0)) s in all)"
