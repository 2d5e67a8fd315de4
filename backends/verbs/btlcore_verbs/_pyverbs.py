"""pyverbs, imported once, with a precise reason when it cannot be.

rdma-core renamed ``pyverbs.enums`` to ``pyverbs.libibverbs_enums`` (v59); both are accepted.
Debian's python3-pyverbs is built for Debian's /usr/bin/python3 only: a virtualenv on another
interpreter (pyenv) does not see it, and PyPI's pyverbs is a source package that needs the
rdma-core development files of the same version.
"""

from __future__ import annotations

import os
import sys
from typing import Any

DEBIAN_PYVERBS = "/usr/lib/python3/dist-packages/pyverbs"

_loaded: dict[str, Any] | None = None
_error: str | None = None


def import_error_reason(exc: BaseException) -> str:
    here = f"{sys.executable}, Python {sys.version.split()[0]}"
    if os.path.isdir(DEBIAN_PYVERBS) and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        return (f"pyverbs is not installed for this Python ({here}): Debian's python3-pyverbs "
                f"serves /usr/bin/python3 only (run btlcore under /usr/bin/python3 with the venv's "
                f"site-packages added, as scripts/vm/guest/sitecustomize.py does)")
    return (f"pyverbs is not installed for this Python ({here}): install Debian's "
            f"python3-pyverbs and ibverbs-providers ({type(exc).__name__}: {exc})")


def load() -> dict[str, Any]:
    """The pyverbs names the backend uses; raises ImportError with a precise reason."""
    global _loaded, _error
    if _loaded is not None:
        return _loaded
    if _error is not None:
        raise ImportError(_error)
    try:
        try:
            from pyverbs import libibverbs_enums as enums  # rdma-core >= 59
        except ImportError:
            from pyverbs import enums
        from pyverbs import addr, cq, device, mr, pd, qp, wr
        from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
    except ImportError as exc:
        _error = import_error_reason(exc)
        raise ImportError(_error) from exc
    _loaded = dict(
        e=enums, get_device_list=device.get_device_list, Context=device.Context, PD=pd.PD,
        CQ=cq.CQ, QP=qp.QP, QPAttr=qp.QPAttr, QPCap=qp.QPCap, QPInitAttr=qp.QPInitAttr,
        MR=mr.MR, SGE=wr.SGE, SendWR=wr.SendWR, RecvWR=wr.RecvWR, AH=addr.AH,
        AHAttr=addr.AHAttr, GlobalRoute=addr.GlobalRoute, GID=addr.GID,
        PyverbsError=PyverbsError, PyverbsRDMAError=PyverbsRDMAError,
    )
    return _loaded

