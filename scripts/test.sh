#!/usr/bin/env bash
# The test command (README; .ci/run runs exactly this): set up, install the optional
# system tools some tests use (as root, where missing), lint (ruff) and type-check (mypy
# --strict; both configured in pyproject.toml), run the test suite, then the verbs backend's
# tests inside a qemu VM on Soft-RoCE (skipped, with the reason, where qemu cannot run).
# The suite runs the compiled build where setup.sh could compile it, then the core and
# conformance tests again on the pure-Python build (BTL_PURE=1).
# A lint or type error fails the script; the tests still run, so one run shows everything.
# Exit 5 from pytest (nothing collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

# nftables: the two-host test's packet loss; tshark: reading our pcaps as Wireshark does
want=()
command -v nft >/dev/null 2>&1 || want+=(nftables)
command -v tshark >/dev/null 2>&1 || want+=(tshark)
if [ ${#want[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${want[*]} (for the netns and tshark tests)"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -qq && apt-get install -y -qq "${want[@]}"; } >/tmp/btlcore-apt.log 2>&1 \
            || echo "could not install ${want[*]} (see /tmp/btlcore-apt.log); their tests will skip"
    else
        echo "not root or no apt-get: ${want[*]} missing; their tests will skip"
    fi
fi

lint=0
echo "== lint: ruff check . =="
.venv/bin/ruff check . || { echo "ruff check FAILED"; lint=1; }
echo "== types: mypy (strict: btlcore, backends, plugins) =="
.venv/bin/mypy || { echo "mypy FAILED"; lint=1; }

.venv/bin/python -m pytest -q -p no:cacheprovider -m "not verbs_vm" "$@"
status=$?
[ $lint -eq 0 ] || status=1

# The pure-Python build too (BTL_PURE=1: the same sources, uncompiled): the protocol core's
# tests and the backends' conformance suites, on both cores (about 20 s; the property tests,
# a minute and a half on the pure build, run on the compiled one above, and
# tests/regression/test_builds.py checks that both builds give the same bytes).
if [ $# -eq 0 ]; then
    if [ "$(.venv/bin/python -W ignore -c 'import btlcore; print(btlcore.compiled)')" = "True" ]; then
        echo "== the pure-Python build (BTL_PURE=1): core and conformance tests =="
        BTL_PURE=1 .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 -m "not verbs_vm" \
            tests/core tests/test_conformance_sim.py tests/test_conformance_udp.py \
            --ignore=tests/core/test_properties.py || { echo "pure-Python build tests FAILED"; status=1; }
    else
        echo "== the suite above ran the pure-Python build (nothing compiled): no second run =="
    fi
fi

if [ $# -eq 0 ] && [ -x scripts/vm/run-verbs-tests.sh ]; then
    echo "== verbs backend on Soft-RoCE (rdma_rxe) in a qemu VM =="
    timeout 2400 bash scripts/vm/run-verbs-tests.sh || { echo "verbs VM tests FAILED"; status=1; }
fi
exit $status
