"""Where this rank's TCP transport listens: the address torch's own Gloo would take, so that a
setup that works for gloo works for ringzip (GLOO_SOCKET_IFNAME, else the host name's address)."""
from __future__ import annotations

import fcntl
import os
import socket
import struct
import warnings

_SIOCGIFADDR = 0x8915


def listen_address() -> str:
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0].strip()
    if ifname:
        return interface_address(ifname)
    host = socket.gethostname()
    try:
        family, _, _, _, sockaddr = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((sockaddr[0], 0))  # an address of this machine, not a stale /etc/hosts entry
        return sockaddr[0]
    except OSError as e:
        warnings.warn(f"ringzip: the host name {host!r} gives no address of this machine ({e}); the group "
                      f"listens on 127.0.0.1, which peers on other machines cannot reach (set "
                      f"GLOO_SOCKET_IFNAME to the interface they reach this one on)", stacklevel=4)
        return "127.0.0.1"


def interface_address(ifname: str) -> str:
    """The IPv4 address of network interface ``ifname``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname[:15].encode()))
        except OSError as e:
            raise RuntimeError(f"ringzip: GLOO_SOCKET_IFNAME={ifname!r}: the interface has no IPv4 address "
                               f"({e.strerror})") from None
    return socket.inet_ntoa(raw[20:24])
