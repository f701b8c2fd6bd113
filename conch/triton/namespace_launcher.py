"""Run inside a network namespace of its own (``unshare --user --map-root-user --net``): bring its loopback up,
start tritonserver there, and pass every connection made to the host's 127.0.0.1 listening sockets it was
handed on to the same port of the namespace's loopback, where tritonserver listens (its SageMaker port on
every interface of a namespace that has only ``lo``). It ends as tritonserver ended: the same exit code, or
killed by the same signal, so its parent reads tritonserver's status from it.

    python -m conch.triton.namespace_launcher --forward FD:PORT [--forward FD:PORT ...] -- tritonserver ARGS
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading

from conch.scratch import die_with_parent

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h
IFREQ = "16sh22x"  # struct ifreq: the interface name, then ifr_flags in a 24-byte union
CHUNK = 1024 * 1024  # one splice moves what a large tensor body has ready, in few wake-ups
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # asked of the launcher: meant for tritonserver
LAUNCH_FAILED = 125  # the launcher itself failed before tritonserver ran (as env(1) and unshare(1) say it)


def loopback_up() -> None:
    """Bring ``lo`` up: a new network namespace's loopback starts down (Linux netdevice(7) ioctls)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        name = b"lo"
        flags = struct.unpack(IFREQ, fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack(IFREQ, name, 0)))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack(IFREQ, name, flags | IFF_UP))


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy one direction until its end, passed on as a half close; bytes go socket -> pipe -> socket inside
    the kernel (splice(2)), never through Python."""
    pipe_r, pipe_w = os.pipe()
    try:
        with contextlib.suppress(OSError):  # a larger pipe: fewer wake-ups per large body (the default is 64 KiB)
            fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, CHUNK)
        while size := os.splice(source.fileno(), pipe_w, CHUNK):
            while size:
                size -= os.splice(pipe_r, sink.fileno(), size)
        sink.shutdown(socket.SHUT_WR)
    except OSError:  # a reset on one side resets the other, as a caller without the hop would see it
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                end.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(pipe_r)
        os.close(pipe_w)


def _relay(client: socket.socket, port: int) -> None:
    """One host connection to the namespace's ``127.0.0.1:port`` and back, a thread per direction."""
    with client:
        try:
            inner = socket.create_connection(("127.0.0.1", port))
        except OSError:  # nothing listens there (yet): the caller sees its connection reset
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        with inner:
            for end in (client, inner):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            back = threading.Thread(target=_pump, args=(inner, client), daemon=True)
            back.start()
            _pump(client, inner)
            back.join()


def forward(listener: socket.socket, port: int) -> None:
    """Pass every connection accepted on ``listener`` on to ``127.0.0.1:port``, each in a thread of its own,
    until the listener is shut down."""
    with contextlib.suppress(OSError):
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_relay, args=(client, port), daemon=True).start()


def _exit_as(returncode: int) -> None:
    """End this process as tritonserver ended."""
    if returncode < 0:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # tritonserver's crash is in its log, not our core
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep their default action anyway
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        sys.exit(128 - returncode)  # a signal whose default action is not to end a process
    sys.exit(returncode)


def _launch(forwards: list[tuple[int, int]], command: list[str]) -> int:
    for fd, port in forwards:
        listener = socket.socket(fileno=fd)
        threading.Thread(target=forward, args=(listener, port), daemon=True).start()
    # started from the main thread, which lives as long as this process: tritonserver dies with it, as with
    # conch (PR_SET_PDEATHSIG fires when the thread that started a process ends)
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    for signum in PASSED_ON:
        signal.signal(signum, lambda signum, frame: server.send_signal(signum))
    return server.wait()


def parse_forward(text: str) -> tuple[int, int]:
    fd, _, port = text.partition(":")
    return int(fd), int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m conch.triton.namespace_launcher")
    parser.add_argument("--forward", action="append", type=parse_forward, default=[], metavar="FD:PORT")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        loopback_up()
    except OSError as exc:
        print(f"conch: could not bring the network namespace's loopback up: {exc}", file=sys.stderr, flush=True)
        sys.exit(LAUNCH_FAILED)
    _exit_as(_launch(args.forward, command))


if __name__ == "__main__":
    main()
