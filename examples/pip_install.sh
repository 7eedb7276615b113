#!/bin/sh
# examples/pip_install.sh SRC WORK - docs/install.md's pip recipe, run as
# written: a virtual environment in ~/xfer-venv, `pip install .` of the
# source tree SRC into it, and one transfer through the installed package
# with no environment variable pointing at the build (issue 29 item 2).
#
# The suite (tests/install) runs it with HOME=WORK, a folder of the build
# tree kept between runs, and PIP_CONFIG_SETTINGS=builddir=...: the same
# venv path and meson-python build folder each time, so a second run
# rebuilds only what changed (ccache covers a fresh one).
set -eu
mkdir -p "$2"
cd "$1"
unset PYTHONPATH LD_LIBRARY_PATH
# Debian's python3 (a pyenv one earlier on PATH may lack python3-mesonpy).
PATH=/usr/bin:/bin
export PATH
rm -rf ~/xfer-venv
# --system-site-packages: meson-python, meson and ninja come from Debian's
# packages (python3-mesonpy, meson, ninja-build), as pip cannot reach a
# package index here; --no-build-isolation uses them as they are.
python3 -m venv --system-site-packages ~/xfer-venv
~/xfer-venv/bin/pip install --no-build-isolation .
~/xfer-venv/bin/python examples/python/loop_transfer.py
# The package imported is the one installed in the venv.
cd /
~/xfer-venv/bin/python -c 'import xfer; print(xfer.__file__)' >~/where
case "$(cat ~/where)" in
"$HOME"/xfer-venv/lib/python3*/site-packages/xfer/__init__.py) ;;
*) echo "pip_install: imported $(cat ~/where), not the venv's" >&2; exit 1 ;;
esac
test -f "$(dirname "$(cat ~/where)")/py.typed"
test -f "$(dirname "$(cat ~/where)")/__init__.pyi"
