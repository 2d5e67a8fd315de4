"""``python -m btlcore.cli``: the same as ``btl``."""

from . import main

raise SystemExit(main())
