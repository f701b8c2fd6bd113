"""A connection that drops as tritonserver dies is seen before the server can be reaped (the kernel closes a dying
process's sockets first): the fleet names the death, not a server that "did not answer". Run 3 of issue 40 saw
that window under load: the call said "did not answer" (InternalFailure 500), boto3 sent it again, and it ran on
the restarted server. A real process stands in for the server here; its death, a moment after the drop, is the
window."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

from conch.endpoint.disk import DiskCache
from conch.endpoint.fleet import DYING_S, Budgets, Fleet
from conch.endpoint.hop import HopError, TritonHop
from conch.endpoint.metrics import Metrics
from conch.endpoint.protocol import ModelError
from conch.endpoint.sources import FolderSource


def answer_for(tmp_path: Path, server: subprocess.Popen[bytes]) -> Exception:
    async def main() -> Exception:
        (tmp_path / "src").mkdir()
        hop = TritonHop("http://127.0.0.1:9")  # never reached
        fleet = Fleet(FolderSource(tmp_path / "src"), DiskCache(tmp_path / "disk"), hop, Metrics(), Budgets(),
                      lambda: 0, server_alive=lambda: server.poll() is None)
        try:
            return await fleet.unreachable("a.tar.gz", HopError("Server disconnected"))
        finally:
            await hop.close()

    return asyncio.run(main())


def test_a_server_that_exits_just_after_the_drop_is_named_as_exited(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killer = threading.Timer(DYING_S / 4, server.kill)
    killer.start()
    try:
        answer = answer_for(tmp_path, server)
    finally:
        killer.cancel()
        server.kill()
        server.wait()
    assert isinstance(answer, ModelError)
    assert "TargetModel 'a.tar.gz': tritonserver exited while serving it" in str(answer)


def test_a_server_still_alive_after_the_wait_did_not_answer(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        answer = answer_for(tmp_path, server)
    finally:
        server.kill()
        server.wait()
    assert not isinstance(answer, ModelError)
    assert "TargetModel 'a.tar.gz': tritonserver did not answer (HopError: Server disconnected)" in str(answer)
