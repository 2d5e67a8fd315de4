"""Config: defaults, validation messages, BTL_ environment variables, strings."""

from __future__ import annotations

import attrs
import pytest

from btlcore.config import Config
from btlcore.errors import BtlDeprecationWarning, ConfigError


def test_defaults() -> None:
    c = Config()
    assert c.window == 4096 and c.ordered is True and c.priority_limit == 768
    assert c.max_resends_per_pass == 16 and c.retrans_timeout == 0.005
    assert c.rto_mode == "adaptive" and c.crc == "auto" and c.ack_delay == 200e-6
    assert c.fast_retransmit_threshold == 3 and c.ack_frequency == 8
    # every parameter is documented with its allowed values
    for name, default, allowed, doc in Config.describe():
        assert doc and allowed
        assert getattr(c, name) == default


BAD = [
    ("window", 7, "an integer from 8 to "),
    ("window", 2**20 + 1, "an integer from 8 to "),
    ("window", 100.0, "an integer"),
    ("window", True, "an integer"),
    ("ordered", 1, "true or false"),
    ("ack_delay", -1e-9, "a number from 0 to 1"),
    ("ack_delay", float("nan"), "a number from 0 to 1"),
    ("ack_delay", "0.1", "a number"),
    ("rto_mode", "fast", "one of adaptive, fixed"),
    ("crc", "yes", "one of auto, on, off"),
    ("max_retries", 0, "an integer from 1 to"),
    ("cwnd_initial", 1, "an integer from 2 to"),
    ("peer_timeout", 0.0, "a number from 0.001 to 86400"),
]


@pytest.mark.parametrize("name,value,allowed", BAD)
def test_bad_value_names_parameter_and_allowed(name: str, value: object, allowed: str) -> None:
    with pytest.raises(ConfigError) as ei:
        Config(**{name: value})
    msg = str(ei.value)
    assert repr(name) in msg and f"BTL_{name.upper()}" in msg
    assert allowed in msg
    assert isinstance(ei.value, ValueError)


@pytest.mark.parametrize("name,value,allowed", [
    ("window", 2**20 + 1, "an integer from 8 to 1048576"),
    ("max_message_size", 2**32, "an integer from 1 to 4294967295"),
])
def test_bad_value_states_exact_bounds(name: str, value: object, allowed: str) -> None:
    with pytest.raises(ConfigError) as ei:
        Config(**{name: value})
    assert allowed in str(ei.value)
    # the stated bound itself is accepted
    Config(**{name: int(allowed.rsplit(" ", 1)[1])})


def test_boundaries_accepted() -> None:
    with pytest.warns(BtlDeprecationWarning):  # (cwnd_max=0: the deprecated alias of cc=none, still taken)
        c = Config(window=8, ack_delay=0.0, mtu=128, priority_limit=0, cwnd_max=0)
    assert c.window == 8 and c.mtu == 128
    assert Config(ack_delay=1).ack_delay == 1  # an int is a number


def test_cross_checks() -> None:
    with pytest.raises(ConfigError, match="'rto_min'.*'rto_max'"):
        Config(rto_min=1.0, rto_max=0.5)
    with pytest.raises(ConfigError, match="'mtu'.*0 or an integer from 128"):
        Config(mtu=127)


def test_frozen_and_evolve_validates() -> None:
    c = Config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.window = 9  # type: ignore[misc]
    with pytest.raises(ConfigError, match="window"):
        attrs.evolve(c, window=1)


def test_from_strings() -> None:
    c = Config.from_strings([("window", "0x100"), ("ordered", "off"), ("ack_delay", "1e-3"),
                             ("rto_mode", " fixed "), ("accept_peers", "YES")])
    assert (c.window, c.ordered, c.ack_delay, c.rto_mode, c.accept_peers) == (256, False, 1e-3, "fixed", True)
    base = Config(window=64)
    assert Config.from_strings([("ack_frequency", "2")], base).window == 64


@pytest.mark.parametrize("name,text", [("window", "lots"), ("ordered", "maybe"), ("ack_delay", "soon"),
                                       ("window", "4")])
def test_from_strings_bad_text_names_parameter(name: str, text: str) -> None:
    with pytest.raises(ConfigError) as ei:
        Config.from_strings([(name, text)])
    assert repr(name) in str(ei.value) and "allowed is" in str(ei.value)


def test_unknown_parameter_lists_known() -> None:
    with pytest.raises(ConfigError) as ei:
        Config.from_strings([("windw", "8")])
    assert "'windw'" in str(ei.value) and "window" in str(ei.value) and "ack_delay" in str(ei.value)
    with pytest.raises(ConfigError, match="unknown parameter 'nope'.*window"):
        Config.build({"nope": 1}, environ={})


def test_env() -> None:
    c = Config.from_env({"BTL_WINDOW": "512", "BTL_ORDERED": "0", "PATH": "/bin", "XBTL_WINDOW": "x"})
    assert c.window == 512 and c.ordered is False


def test_env_typo_lists_known_variables() -> None:
    with pytest.raises(ConfigError) as ei:
        Config.from_env({"BTL_WINDOWS": "512"})
    msg = str(ei.value)
    assert "BTL_WINDOWS" in msg and "BTL_WINDOW" in msg and "BTL_ACK_DELAY" in msg


def test_env_bad_value() -> None:
    with pytest.raises(ConfigError, match="'window'.*BTL_WINDOW"):
        Config.from_env({"BTL_WINDOW": "3"})


@pytest.mark.parametrize("key", ["BTL_BACKEND", "BTL_SEED", "BTL_PLUGINS", "BTL_SIM_LOSS",
                                 "BTL_UDP_PORT", "BTL_VERBS_DEVICE", "BTL_TEST_X"])
def test_env_reserved_ignored(key: str) -> None:
    assert Config.from_env({key: "whatever"}) == Config()


def test_build_precedence() -> None:
    c = Config.build({"window": 64}, environ={"BTL_WINDOW": "32", "BTL_ACK_FREQUENCY": "3"})
    assert c.window == 64 and c.ack_frequency == 3
    assert Config.build(environ={}) == Config()
