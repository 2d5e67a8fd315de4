"""``python -m benchmarks`` (from the repository root): the same as ``btl bench``."""

import sys

from .runner import main

sys.exit(main())
