"""The ``sim`` backend: a simulated fabric of NICs in virtual time, with netem-like link
impairments, scripted faults, pcapng capture and per-link statistics.

::

    from btlcore_sim import Fabric, LinkModel
    fabric = Fabric(seed=1, default=LinkModel(delay=10e-6), pcap="run.pcapng")
    a = fabric.open_device(name="a")          # = registry.open_device("sim", {...})
    b = fabric.open_device(name="b")
    fabric.set_link("a", "b", LinkModel(delay=10e-6, loss=0.01))

Modules, one concept each: ``scheduler`` (virtual time), ``models`` (link models),
``links`` (the impairments, applied per frame), ``nic`` (the device object), ``queues``
(queue sizes, the shared bottleneck and its AQM), ``rules`` (partitions; every other scripted fault is a rule of
:mod:`btlcore.faults` on ``fabric.faults``), ``pcap``
(capture), ``fabric`` (putting them together), ``plugin`` (the hooks), ``layers`` (scapy
layers) and ``scapy`` (``import btlcore_sim.scapy``: those layers bound for ``rdpcap``, on any
UDP port), both imported only on demand (scapy is slow to load), ``selftest`` (raw speed).
"""

from typing import Any

import btlcore  # noqa: F401 (first: it chooses the compiled or the pure build)

from .fabric import Fabric, default_fabric, reset_default_fabric
from .links import DROP_CAUSES, Link
from .models import LinkModel
from .nic import SimNIC
from .queues import Bottleneck, parse_queue
from .rules import Partition

__all__ = ["DROP_CAUSES", "Bottleneck", "Fabric", "Link", "LinkModel", "Partition", "SimNIC",
           "default_fabric", "parse_queue", "reset_default_fabric"]


def __getattr__(name: str) -> Any:
    """``DropRule``, deprecated: :class:`btlcore.faults.Rule`."""
    if name == "DropRule":
        from . import rules

        return rules.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
