"""Dask's ``btl://`` comm backend: Dask's comms carried by btlcore (install ``btlcore[dask]``).

Dask finds it through the entry-point group ``distributed.comm.backends`` (name ``btl``), so
``btl://HOST:PORT`` works wherever Dask takes an address::

    LocalCluster(protocol="btl://")            # scheduler and workers on btl://
    dask scheduler --protocol btl              # by hand
    dask worker btl://HOST:PORT
    Client("btl://HOST:PORT")

Modules: :mod:`.frames` (the bytes inside btlcore messages, sans I/O), :mod:`.mux` (comms
multiplexed over one btlcore peer, chunks scheduled fairly), :mod:`.comm` (Dask's ``Comm``),
:mod:`.backend` (addresses, connector, listener, the transports behind them).
See docs/integrations.md.
"""

from .backend import BTLBackend, BTLConnector, BTLListener
from .comm import BTLComm
from .mux import ForkedTransport

__all__ = ["BTLBackend", "BTLComm", "BTLConnector", "BTLListener", "ForkedTransport"]
