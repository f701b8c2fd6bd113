"""Where tritonserver listens: in a network namespace of its own whose only interface is its loopback, reached
from the host through listening sockets conch binds on the host's 127.0.0.1 and hands to the launcher
(conch.triton.namespace_launcher). Triton 2.51's SageMaker port cannot be bound to an address; inside such a
namespace its "every interface" is that loopback. Where the platform refuses unprivileged user namespaces
(Ubuntu's AppArmor restriction, a container's seccomp profile) the server runs on the host, its SageMaker port
open on every interface, and conch says so once per process unless ``CONCH_ALLOW_EXPOSED_TRITON=1``
(``--allow-exposed-triton``) says the user accepts it."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

UNSHARE_ENV = "CONCH_UNSHARE"  # the unshare(1) command to run (default: `unshare` on PATH); tests name a missing one
ALLOW_EXPOSED_ENV = "CONCH_ALLOW_EXPOSED_TRITON"  # "1": run exposed where namespaces are refused, without a warning
UNSHARE_ARGS = ("--user", "--map-root-user", "--net")  # no mount or IPC namespace: stubs share /dev/shm with Triton
PROBE_TIMEOUT_S = 10.0
# The launcher imports this very conch, wherever it was imported from (an install, a checkout on sys.path or the
# working folder): the server's working folder is another one, and its environment is the user's.
CONCH_ROOT = str(Path(__file__).resolve().parents[2])
LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); from conch.triton.namespace_launcher import main; main()"

log = logging.getLogger("conch.server")
_refusals: dict[str, str] = {}  # unshare command -> why it cannot be used ('' when it can)
_warned = False


def unshare_command() -> str | None:
    """The unshare(1) to run: ``CONCH_UNSHARE`` (a name on PATH or a path), by default ``unshare``; None when
    there is no such command."""
    return shutil.which(os.environ.get(UNSHARE_ENV) or "unshare")


def refused() -> str:
    """Why tritonserver cannot run in a network namespace of its own here ('' when it can); asked of the
    platform once per process and unshare command (a run of ``unshare ... true``, a few ms)."""
    command = unshare_command()
    if command is None:
        return f"the util-linux command `{os.environ.get(UNSHARE_ENV) or 'unshare'}` was not found"
    if command not in _refusals:
        probe = [command, *UNSHARE_ARGS, "--", sys.executable, "-c", ""]
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
            why = "" if done.returncode == 0 else (done.stderr.strip() or f"exit code {done.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
        _refusals[command] = f"`{command} {' '.join(UNSHARE_ARGS)}` failed: {why}" if why else ""
    return _refusals[command]


def loopback_listener(port: int = 0) -> socket.socket:
    """A TCP socket listening on the host's 127.0.0.1 (``port`` 0: one the kernel picks, with no race)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def launcher_command(unshare: str, listeners: Sequence[socket.socket], server: Sequence[str]) -> list[str]:
    """``server`` run in a new user and network namespace, each listener's connections passed on to the same
    port of that namespace's loopback (Popen it with ``pass_fds`` of the listeners)."""
    forwards = [f"--forward={s.fileno()}:{s.getsockname()[1]}" for s in listeners]
    return [unshare, *UNSHARE_ARGS, "--", sys.executable, "-c", LAUNCH, CONCH_ROOT, *forwards, "--", *server]


def exposed_allowed() -> bool:
    return os.environ.get(ALLOW_EXPOSED_ENV, "") not in ("", "0")


def exposure_warning(port: int, why: str) -> str:
    return (f"tritonserver's SageMaker port {port} listens on every interface of this machine while conch runs: "
            f"{why}, so it cannot get a network namespace of its own. Anyone who reaches this machine can load, "
            "unload and call models on it. Allow unprivileged user namespaces (Ubuntu 24.04: an AppArmor profile "
            "granting `userns` to unshare, or sysctl kernel.apparmor_restrict_unprivileged_userns=0), or run on "
            f"a trusted network with --allow-exposed-triton ({ALLOW_EXPOSED_ENV}=1) to silence this warning")


def warn_exposed(port: int, why: str) -> None:
    """Say once per process that the SageMaker port is open to the network, unless the user allowed it."""
    global _warned
    if _warned or exposed_allowed():
        return
    _warned = True
    log.warning("%s", exposure_warning(port, why))
