"""``python -m btlcore.bench``: the same as ``btl bench``."""

import sys

from .runner import main

sys.exit(main())
