"""What a process tree exposes: its listening TCP sockets on this machine's interfaces (the host's network
namespace), and, for its processes in network namespaces of their own, which interfaces those have."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import psutil
import pytest

from conch.triton.network_namespace import refused

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp
# Where the machine refuses user namespaces (Ubuntu 24.04's AppArmor default, e.g. GitHub's ubuntu-24.04 runners),
# conch runs tritonserver on the host and says so: what only a namespace gives cannot be asserted there.
needs_namespaces = pytest.mark.skipif(bool(refused()), reason=f"this machine refuses user namespaces: {refused()}")


def tree(pid: int) -> list[psutil.Process]:
    with_children = psutil.Process(pid)
    return [with_children, *with_children.children(recursive=True)]


def host_listeners(pid: int) -> dict[int, str]:
    """Port -> address of every socket the tree listens on in the host's network namespace (psutil reads this
    process's /proc/net/tcp{,6} and maps each socket's inode to the processes holding it)."""
    pids = {p.pid for p in tree(pid)}
    return {c.laddr.port: c.laddr.ip for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # gRPC listens on IPv6 with the IPv4 address mapped
    return (mapped or address).is_loopback


def netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def interfaces(pid: int) -> list[str]:
    """The network interfaces of ``pid``'s network namespace."""
    lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":")[0].strip() for line in lines)


def namespace_listeners(pid: int) -> dict[int, str]:
    """Port -> address of the sockets listening in ``pid``'s network namespace (all of them, any owner)."""
    found = {}
    for table, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state != LISTEN:
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            # the kernel prints the address as 32-bit words in host (little-endian) order
            ordered = b"".join(raw[i:i + 4][::-1] for i in range(0, size, 4))
            found[int(hex_port, 16)] = str(ipaddress.ip_address(ordered))
    return found


def exposed(pid: int) -> tuple[dict[int, str], dict[str, list[str]]]:
    """(the tree's host listeners outside loopback, the interfaces of each other namespace the tree runs in that
    has an interface besides ``lo``): both empty when nothing the tree runs is reachable from the network."""
    outside = {port: ip for port, ip in host_listeners(pid).items() if not loopback(ip)}
    mine = netns(os.getpid())
    wider = {}
    for process in tree(pid):
        try:
            namespace = netns(process.pid)
            if namespace != mine and interfaces(process.pid) != ["lo"]:
                wider[namespace] = interfaces(process.pid)
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return outside, wider


def tritonserver_pids(pid: int) -> list[int]:
    return [p.pid for p in tree(pid) if p.name() == "tritonserver"]
