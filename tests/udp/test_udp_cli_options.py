"""What the udp backend adds to the ``btl`` command: the wildcard binds it chooses when
``--bind`` is not given, and the ``HOST:PORT`` text of an address (issue #11, item 9)."""

from __future__ import annotations

import argparse
import socket

import pytest

from btlcore_udp import _address, plugin


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"bind": None, "port": 0, "option": None, "peer": None}
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    for name in ("BTL_UDP_BIND", "BTL_UDP_HOST", "BTL_UDP_PORT"):
        monkeypatch.delenv(name, raising=False)


def test_transfer_binds_the_wildcard_and_advertises_its_route_to_the_peer():
    opts = plugin.btl_cli_device_options(command="transfer", args=_args(peer="127.0.0.1:7000"))
    assert opts == {"bind": "0.0.0.0:0", "advertise": "127.0.0.1"}
    opts = plugin.btl_cli_device_options(command="transfer", args=_args(peer="[::1]:7000"))
    assert opts == {"bind": "[::]:0", "advertise": "::1"}


def test_serve_binds_the_dual_stack_wildcard_on_port():
    opts = plugin.btl_cli_device_options(command="serve", args=_args(port=7000))
    assert opts["bind"] in ("[::]:7000", "0.0.0.0:7000")


def test_the_users_bind_wins():
    assert plugin.btl_cli_device_options(command="serve", args=_args(bind="127.0.0.1:0")) == {"bind": "127.0.0.1:0"}
    assert plugin.btl_cli_device_options(command="transfer", args=_args(option=["bind=127.0.0.1:0"],
                                                                            peer="127.0.0.1:7000")) == {}
    with pytest.raises(ValueError, match="--bind HOST:PORT or --port PORT"):
        plugin.btl_cli_device_options(command="serve", args=_args(bind="127.0.0.1:0", port=7000))


def test_environment_bind_is_left_alone(monkeypatch):
    monkeypatch.setenv("BTL_UDP_BIND", "127.0.0.1:0")
    assert plugin.btl_cli_device_options(command="serve", args=_args()) == {}


def test_address_text_is_host_and_one_port():
    v4 = _address.encode(socket.AF_INET, "10.0.0.1", 7000, 7001)
    v6 = _address.encode(socket.AF_INET6, "fd00::1", 7000, 7001)
    mapped = _address.encode(socket.AF_INET6, "::ffff:10.0.0.1", 7000, 7001)
    apart = _address.encode(socket.AF_INET, "10.0.0.1", 7000, 9000)
    assert plugin.btl_cli_format_address(address=v4) == "10.0.0.1:7000"
    assert plugin.btl_cli_format_address(address=v6) == "[fd00::1]:7000"
    assert plugin.btl_cli_format_address(address=mapped) == "10.0.0.1:7000"
    assert plugin.btl_cli_format_address(address=apart) == "udp://10.0.0.1:7000+9000"
    # and --peer takes the text back
    assert plugin.btl_cli_parse_address(text="10.0.0.1:7000") == v4
    assert plugin.btl_cli_parse_address(text="[fd00::1]:7000") == v6
