import socket

import pytest

from tests.conftest import NetworkCallError


def test_network_connections_are_refused_in_the_suite():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkCallError, match="must work offline"):
            s.connect(("93.184.216.34", 80))
    finally:
        s.close()


def test_loopback_is_still_allowed():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.socket()
    try:
        client.connect(server.getsockname())
    finally:
        client.close()
        server.close()


def test_hub_download_fails_fast_instead_of_reaching_out():
    from transformers import AutoConfig

    with pytest.raises(OSError):
        AutoConfig.from_pretrained("bert-base-uncased")
