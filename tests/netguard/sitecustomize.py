"""Network guard of the Ray tests: Python code may connect to loopback addresses only.

Every Python process of a Ray test loads this file at start-up (the tests put this folder first on
``PYTHONPATH`` before starting the cluster, so the driver, the raylets' workers, the dashboard and
its agents inherit it), and the test process calls :func:`install` itself. A connection or DNS
lookup for any other address is refused before a packet leaves (``ConnectionRefusedError`` /
``socket.gaierror``, which Ray's optional probes, such as the cloud-metadata request of its usage
statistics, already treat as "not there") and appended to the file named by
``DEPTHLAB_NETGUARD_LOG``, so a test can show what was refused.
"""

import ipaddress
import os
import socket

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}


def _is_loopback(host) -> bool:
    host = str(host).split("%")[0].strip("[]")
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _refuse(what: str) -> None:
    path = os.environ.get("DEPTHLAB_NETGUARD_LOG")
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {what}\n")
        except OSError:
            pass


_REAL: dict = {}


def install() -> None:
    """Wrap ``socket.socket.connect/connect_ex/sendto`` and ``socket.getaddrinfo`` (once per process)."""
    if _REAL:
        return
    _REAL.update(connect=socket.socket.connect, connect_ex=socket.socket.connect_ex, sendto=socket.socket.sendto,
                 getaddrinfo=socket.getaddrinfo)
    real_connect, real_connect_ex, real_sendto = socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto
    real_getaddrinfo = socket.getaddrinfo

    def blocked(sock, address) -> bool:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple) \
                and not _is_loopback(address[0]):
            _refuse(f"connect {address[0]}:{address[1]}")
            return True
        return False

    def connect(self, address):
        if blocked(self, address):
            raise ConnectionRefusedError(111, f"network guard: {address[0]} is not a loopback address")
        return real_connect(self, address)

    def connect_ex(self, address):
        return 111 if blocked(self, address) else real_connect_ex(self, address)

    def sendto(self, data, *args):
        if args and blocked(self, args[-1]):
            raise ConnectionRefusedError(111, "network guard: not a loopback address")
        return real_sendto(self, data, *args)

    def getaddrinfo(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and not _is_loopback(name) and not _is_ip(name):
            _refuse(f"resolve {name}")
            raise socket.gaierror(socket.EAI_NONAME, f"network guard: {name} is not resolved in tests")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = connect, connect_ex, sendto
    socket.getaddrinfo = getaddrinfo


def uninstall() -> None:
    """Undo :func:`install` in this process."""
    if _REAL:
        socket.socket.connect, socket.socket.connect_ex = _REAL["connect"], _REAL["connect_ex"]
        socket.socket.sendto, socket.getaddrinfo = _REAL["sendto"], _REAL["getaddrinfo"]
        _REAL.clear()


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(str(name).split("%")[0].strip("[]"))
        return True
    except ValueError:
        return False


if os.environ.get("DEPTHLAB_NETGUARD") == "1":
    install()
