"""Loaded by /usr/bin/python3 in the VM guest (scripts/vm/run.sh puts this directory on
PYTHONPATH): adds the repository's virtualenv site-packages, .pth files included (so the
editable btlcore install works), ahead of Debian's dist-packages.

Why not the venv's own interpreter: Debian's python3-pyverbs is built for /usr/bin/python3
(3.11.2); the venv runs pyenv's 3.11.7.  Both are CPython 3.11 with the same ABI and bytecode
magic, so the venv's pure-Python packages (attrs, pluggy, scapy, pytest) and its cp311
extension (crc32c) load unchanged in /usr/bin/python3, and pyverbs comes from Debian.
"""

import os
import site
import sys

_venv_site = os.environ.get("BTLVM_VENV_SITE")
if _venv_site and os.path.isdir(_venv_site):
    _before = list(sys.path)
    site.addsitedir(_venv_site)
    _added = [p for p in sys.path if p not in _before]
    _rest = [p for p in sys.path if p in _before]
    # Debian's dist-packages holds older copies of some packages (pygments, pyparsing,
    # cryptography...): the venv's must win.  The standard library stays first.
    _cut = next((i for i, p in enumerate(_rest) if "-packages" in p), len(_rest))
    sys.path[:] = _rest[:_cut] + _added + _rest[_cut:]
