"""Run inside a network namespace of its own (``unshare --user --map-root-user --net``): bring its loopback up,
start tritonserver there, and pass every connection made to the host's 127.0.0.1 listening sockets it was
handed on to the same port of the namespace's loopback, where tritonserver listens (its SageMaker port on
every interface of a namespace that has only ``lo``). It ends as tritonserver ended: the same exit code, or
killed by the same signal, so its parent reads tritonserver's status from it.

    python -m conch.harness.namespace_launcher --forward FD:PORT [--forward FD:PORT ...] -- tritonserver ARGS
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import os
import resource
import signal
import socket
import struct
import subprocess
import sys

from conch.scratch import die_with_parent

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h
IFREQ = "16sh22x"  # struct ifreq: the interface name, then ifr_flags in a 24-byte union
CHUNK = 256 * 1024  # one read takes what a large tensor body has ready, in few wake-ups
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # asked of the launcher: meant for tritonserver
LAUNCH_FAILED = 125  # the launcher itself failed before tritonserver ran (as env(1) and unshare(1) say it)


def loopback_up() -> None:
    """Bring ``lo`` up: a new network namespace's loopback starts down (Linux netdevice(7) ioctls)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name = b"lo"
        flags = struct.unpack(IFREQ, fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack(IFREQ, name, 0)))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack(IFREQ, name, flags | IFF_UP))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy one direction until its end, which is passed on as a half close."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def _relay(port: int, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    """One host connection to the namespace's ``127.0.0.1:port`` and back; a failure on either side resets
    the other, as a caller without the hop would see it."""
    try:
        inner_r, inner_w = await asyncio.open_connection("127.0.0.1", port, limit=CHUNK)
    except OSError:  # nothing listens there (yet): the caller sees its connection reset
        client_w.transport.abort()
        return
    try:
        await asyncio.gather(_pipe(client_r, inner_w), _pipe(inner_r, client_w))
    except OSError:
        inner_w.transport.abort()
        client_w.transport.abort()
    finally:
        inner_w.close()
        client_w.close()


def _exit_as(returncode: int) -> None:
    """End this process as tritonserver ended."""
    if returncode < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # tritonserver's crash is in its log, not our core
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default action anyway
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        sys.exit(128 - returncode)  # a signal whose default action is not to end a process
    sys.exit(returncode)


async def _launch(forwards: list[tuple[int, int]], command: list[str]) -> int:
    loop = asyncio.get_running_loop()
    servers = []
    for fd, port in forwards:
        sock = socket.socket(fileno=fd)

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter, port: int = port) -> None:
            await _relay(port, r, w)

        servers.append(await asyncio.start_server(handle, sock=sock, limit=CHUNK, backlog=socket.SOMAXCONN))
    # started from this (the loop's) thread: tritonserver dies with it, as with conch (PR_SET_PDEATHSIG)
    server = await asyncio.create_subprocess_exec(*command, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    for signum in PASSED_ON:
        loop.add_signal_handler(signum, server.send_signal, signum)
    returncode = await server.wait()
    for listening in servers:
        listening.close()
    return returncode


def parse_forward(text: str) -> tuple[int, int]:
    fd, _, port = text.partition(":")
    return int(fd), int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m conch.harness.namespace_launcher")
    parser.add_argument("--forward", action="append", type=parse_forward, default=[], metavar="FD:PORT")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        loopback_up()
    except OSError as exc:
        print(f"conch: could not bring the network namespace's loopback up: {exc}", file=sys.stderr, flush=True)
        sys.exit(LAUNCH_FAILED)
    _exit_as(asyncio.run(_launch(args.forward, command)))


if __name__ == "__main__":
    main()
