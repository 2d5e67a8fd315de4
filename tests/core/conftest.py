"""tests/core: the sans-I/O core on virtual time (helpers in tests/enginepair.py)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
