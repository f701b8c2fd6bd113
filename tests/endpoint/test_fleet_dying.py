"""A connection that drops as tritonserver dies is seen before the server can be reaped (the kernel closes a dying
process's sockets first): the fleet names the death, not a server that "did not answer". Run 3 of issue 40 saw
that window under load: the call said "did not answer" (InternalFailure 500), boto3 sent it again, and it ran on
the restarted server. A real process stands in for the server here: the fleet's first look finds it alive and
kills it, as the drop comes before the dying server can be reaped."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conch.endpoint.disk import DiskCache
from conch.endpoint.fleet import Budgets, Fleet
from conch.endpoint.hop import HopError, TritonHop
from conch.endpoint.metrics import Metrics
from conch.endpoint.protocol import ModelError
from conch.endpoint.sources import FolderSource


def answer_for(tmp_path: Path, alive: Callable[[], bool]) -> Exception:
    async def main() -> Exception:
        (tmp_path / "src").mkdir()
        hop = TritonHop("http://127.0.0.1:9")  # never reached
        fleet = Fleet(FolderSource(tmp_path / "src"), DiskCache(tmp_path / "disk"), hop, Metrics(), Budgets(),
                      lambda: 0, server_alive=alive)
        try:
            return await fleet.unreachable("a.tar.gz", HopError("Server disconnected"))
        finally:
            await hop.close()

    return asyncio.run(main())


def test_a_server_that_exits_just_after_the_drop_is_named_as_exited(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    looks: list[bool] = []

    def alive() -> bool:
        if not looks:  # the first look: still running, and dying now
            server.kill()
            looks.append(True)
            return True
        looks.append(server.poll() is None)
        return looks[-1]

    try:
        answer = answer_for(tmp_path, alive)
    finally:
        server.kill()
        server.wait()
    assert looks[0] and not looks[-1], looks  # seen alive at the drop, then seen exited within the fleet's DYING_S
    assert isinstance(answer, ModelError)
    assert "TargetModel 'a.tar.gz': tritonserver exited while serving it" in str(answer)


def test_a_server_still_alive_after_the_wait_did_not_answer(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        answer = answer_for(tmp_path, lambda: server.poll() is None)
    finally:
        server.kill()
        server.wait()
    assert not isinstance(answer, ModelError)
    assert "TargetModel 'a.tar.gz': tritonserver did not answer (HopError: Server disconnected)" in str(answer)
