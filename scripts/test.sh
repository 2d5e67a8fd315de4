#!/usr/bin/env bash
# Set up (if needed) and run the test suite.  Exit 5 from pytest (nothing collected) is a
# failure here: a test run that ran nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
