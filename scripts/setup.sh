#!/usr/bin/env bash
# Set up btlcore on a fresh machine: a virtualenv in .venv with btlcore (editable) and its
# test tools.  Safe to run again: it reinstalls only when pyproject.toml changed.
#
# The install compiles the hot path with mypyc where a C compiler is present (hatch_build.py;
# about a minute and a half on 2 cores) and otherwise stays pure Python, saying so in one line.
# When only the compiled modules' sources changed since, it recompiles them in place: a stale
# build would not run anyway (btlcore/_native.py runs pure Python when a source no longer
# matches what was compiled).  BTL_NO_COMPILE=1 at install: set up the pure build only.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.btlcore-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
log=.venv/install.log
installed=0
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    # Left by the setuptools editable install of releases before 0.2: its old entry points
    # would shadow the installed ones (the checkout's root is on sys.path in editable mode).
    rm -rf btlcore.egg-info
    echo "setting up .venv (pip install -e '.[test,bench,plot,dask]'; log in $log)"
    if ! { .venv/bin/python -m pip install --upgrade pip && \
           .venv/bin/python -m pip install -e '.[test,bench,plot,dask]'; } >"$log" 2>&1; then
        tail -n 30 "$log"
        echo "setup failed: see $log" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
    installed=1  # (the install compiled the hot path: hatch_build.py)
fi

# the compiled build: rebuilt in place when a compiled module's source (or the list) changed
sources() { .venv/bin/python -c 'import importlib.util as u, sys
s = u.spec_from_file_location("n", "btlcore/_native.py"); m = u.module_from_spec(s); s.loader.exec_module(m)
print("\n".join(sorted(m.MODULES.values())))'; }
built=.venv/.btlcore-compiled
have=$(cat hatch_build.py btlcore/_native.py $(sources) | sha256sum | cut -d' ' -f1)
if [ $installed = 0 ] && [ "${BTL_NO_COMPILE:-0}" = "0" ] && [ -f "$built" ] && [ "$(cat "$built")" != "$have" ]; then
    echo "recompiling the hot path (sources changed since the last build; log in $log)"
    .venv/bin/python hatch_build.py >"$log" 2>&1 || true
fi
echo "$have" > "$built"
if [ "$(.venv/bin/python -W ignore -c 'import btlcore; print(btlcore.compiled)' 2>/dev/null)" != "True" ]; then
    echo "btlcore: no compiled hot path (no C compiler, mypyc failed, or BTL_NO_COMPILE; see $log): running pure Python"
fi
