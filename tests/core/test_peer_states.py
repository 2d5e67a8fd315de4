"""The connection state machine: every allowed transition, and the impossible ones raising."""

from __future__ import annotations

import itertools

import pytest

from btlcore import Config
from btlcore.protocol.peers import TRANSITIONS, InvalidTransition, Peer, PeerEvent, PeerState
from btlcore.protocol.rtt import RetransmitTimer
from btlcore.testing.enginepair import EnginePair

S, E = PeerState, PeerEvent
EXPECTED = {
    (S.CONNECTING, E.CONFIRMED): S.ESTABLISHED,
    (S.CONNECTING, E.FAILED): S.FAILED,
    (S.ESTABLISHED, E.FAILED): S.FAILED,
    (S.CONNECTING, E.RESET): S.CONNECTING,
    (S.ESTABLISHED, E.RESET): S.CONNECTING,
    (S.FAILED, E.RESET): S.CONNECTING,
    (S.CONNECTING, E.CLOSED): S.CLOSED,
    (S.ESTABLISHED, E.CLOSED): S.CLOSED,
    # graceful close (issue #11): ours, the peer's, and a new connection after one
    (S.CONNECTING, E.CLOSE): S.CLOSING,
    (S.ESTABLISHED, E.CLOSE): S.CLOSING,
    (S.CLOSING, E.CLOSE_DONE): S.CLOSED,
    (S.CLOSING, E.CLOSED): S.CLOSED,
    (S.CLOSING, E.PEER_CLOSED): S.CLOSED,
    (S.CONNECTING, E.PEER_CLOSED): S.CLOSED,
    (S.ESTABLISHED, E.PEER_CLOSED): S.CLOSED,
    (S.CLOSED, E.RESET): S.CONNECTING,
}


def peer_in(state: PeerState) -> Peer:
    peer = Peer(b"\x01", None, 1, 1, RetransmitTimer(True, 1.0, 0.1, 2.0, 1.0), 64)
    assert peer.state is S.CONNECTING  # where every peer starts
    peer.state = state
    return peer


def test_the_table_is_the_documented_one() -> None:
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize("state,event", sorted(EXPECTED, key=lambda k: (k[0].value, k[1].value)))
def test_every_allowed_transition(state: PeerState, event: PeerEvent) -> None:
    peer = peer_in(state)
    assert peer.transition(event) is EXPECTED[state, event]
    assert peer.state is EXPECTED[state, event]


IMPOSSIBLE = [(s, e) for s, e in itertools.product(PeerState, PeerEvent) if (s, e) not in EXPECTED]


@pytest.mark.parametrize("state,event", IMPOSSIBLE)
def test_an_impossible_transition_raises_and_changes_nothing(state: PeerState, event: PeerEvent) -> None:
    peer = peer_in(state)
    with pytest.raises(InvalidTransition, match=f"event '{event.value}' in state '{state.value}'"):
        peer.transition(event)
    assert peer.state is state


def test_closed_only_resets_and_the_error_lists_what_is_allowed() -> None:
    # a closed connection is over: only a new one (RESET, with new ids) leaves it
    assert [k for k in TRANSITIONS if k[0] is S.CLOSED] == [(S.CLOSED, E.RESET)]
    with pytest.raises(InvalidTransition,
                       match=r"allowed there: close, closed, failed, peer_closed, reset\)"):
        peer_in(S.ESTABLISHED).transition(E.CONFIRMED)
    with pytest.raises(InvalidTransition, match=r"allowed there: reset\)"):
        peer_in(S.CLOSED).transition(E.CLOSE)


def test_the_engine_moves_states_through_the_table() -> None:
    p = EnginePair(Config())
    assert p.connect(0, 1).state is S.CONNECTING
    p.handshake()
    assert p.pa.state is S.ESTABLISHED and p.pb.state is S.ESTABLISHED
    with pytest.raises(InvalidTransition):  # confirming an established connection is a bug
        p.pa.transition(E.CONFIRMED)
    p.a.close()
    assert p.pa.state is S.CLOSED
