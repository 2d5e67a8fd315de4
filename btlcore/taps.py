"""Where tools see or drop the frames a transport sends: send filters (fault injection on
any backend), the tool plugins' frame hooks, and the event trace (:mod:`btlcore.trace`,
re-exported here for the transport).  All cost nothing unless installed: the transport wires
them in only when some plugin implements them, a filter is added, or a trace is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

from .trace import TracePath, open_trace

__all__ = ["Post", "TracePath", "filtered_post", "frame_hooks", "open_trace"]

#: a device's post_send as the transport calls it: (channel, dest, datagram) -> taken
Post = Callable[[int, Any, Any], bool]


def filtered_post(post: Post, keep: Callable[[int, bytes], bool]) -> Post:
    """``post`` behind ``keep(channel, datagram)``: a datagram it refuses is dropped as if
    the network had lost it (and reported as taken, so it still counts as sent)."""

    def filtered(channel: int, dest: Any, data: Any) -> bool:
        if not keep(channel, data):
            return True
        return post(channel, dest, data)

    return filtered


def frame_hooks(pm: pluggy.PluginManager) -> tuple[Any, Any, Any]:
    """The plugins' ``btl_frame_sent``, ``btl_frame_received`` and ``btl_frame_filter``
    hook callers, each None when no plugin implements it."""
    hook = pm.hook

    def implemented(caller: Any) -> Any:
        return caller if caller.get_hookimpls() else None

    return (implemented(hook.btl_frame_sent), implemented(hook.btl_frame_received),
            implemented(hook.btl_frame_filter))
