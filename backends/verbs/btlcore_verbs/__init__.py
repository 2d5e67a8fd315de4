"""The verbs backend: btlcore over RDMA unreliable-datagram queue pairs, through pyverbs.

Open it by name: ``btlcore.registry.open_device("verbs", {"device": "rxe0"})``.

* Two UD QPs per device, one per channel (priority, data), as usnic had; separate receive
  CQs so the priority channel is drained first; one shared send CQ.
* Registered send and receive buffer pools (every receive slot has the 40-byte GRH in front);
  ``poll_recv`` returns memoryviews past the GRH, valid until the next ``poll_recv``.
* Inline sends for datagrams up to the QP's ``max_inline_data`` (option ``inline``).
* MTU: the port's active MTU (UD's payload limit); larger sends raise ``ValueError``.
* Integrity: the link's ICRC protects every frame (``Capabilities.integrity``), so the core
  adds no CRC of its own.
* The address (``local_address``, 36 bytes): GID, LID, QKey, both QPNs, max datagram (see
  ``_address``); ``resolve`` builds one address handle per peer address and caches it.
* Options (``_options.ALLOWED``): device, port, gid_index, qkey, send_queue_depth,
  recv_queue_depth, inline; also as ``BTL_VERBS_<NAME>`` environment variables.
* Needs pyverbs: Debian's python3-pyverbs for /usr/bin/python3 (see scripts/vm/README.md for
  running btlcore's venv under that interpreter).  Without pyverbs or an RDMA device the
  probe says precisely why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._address import VerbsAddress
from ._address import decode as decode_address
from ._options import ALLOWED as OPTIONS
from ._options import VerbsOptions

if TYPE_CHECKING:
    from ._device import VerbsDevice

__all__ = ["OPTIONS", "VerbsAddress", "VerbsOptions", "decode_address", "VerbsDevice"]


def __getattr__(name: str) -> type[VerbsDevice]:  # VerbsDevice imports nothing of pyverbs until a device opens
    if name == "VerbsDevice":
        from ._device import VerbsDevice

        return VerbsDevice
    raise AttributeError(name)
