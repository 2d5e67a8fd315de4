"""Events the engine hands to its driver."""

EV_MESSAGE = 0  # (EV_MESSAGE, peer, tag, data)
EV_COMPLETE = 1  # (EV_COMPLETE, callback, exc_or_None)
EV_PUT = 2  # (EV_PUT, peer, key, offset, length): a put into an exposed region finished
EV_PUT_ERROR = 3  # (EV_PUT_ERROR, peer, key, offset, length): a put that did not fit
EV_PEER_FAILED = 4  # (EV_PEER_FAILED, peer, exc)
EV_PEER_RESTARTED = 5  # (EV_PEER_RESTARTED, peer)
