"""The exception for an event that a connection's state does not allow (see :mod:`.peers`).

A module of its own, left pure Python: a class compiled by mypyc cannot inherit
``RuntimeError``, and :mod:`.peers` is compiled."""

from __future__ import annotations


class InvalidTransition(RuntimeError):
    """An event that the connection's state does not allow (a bug in the engine, never the
    network's doing: the engine checks what it receives before it moves a state)."""
