"""The Dask comm tests need the ``dask`` extra (scripts/setup.sh installs it); their helpers
are in daskkit.py (a module name of its own: every test folder has a ``conftest``)."""

import pytest

pytest.importorskip("distributed", reason="needs the dask extra: pip install -e '.[dask]'")
