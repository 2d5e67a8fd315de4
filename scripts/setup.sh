#!/usr/bin/env bash
# Set up btlcore on a fresh machine: a virtualenv in .venv with btlcore (editable) and its
# test tools.  Safe to run again: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
stamp=.venv/.btlcore-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log=.venv/install.log
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
fi
