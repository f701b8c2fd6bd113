"""The fleet's table of TargetModels stays bounded by what it holds: names that never load (no such archive, an
archive that cannot be unpacked) leave no entry, and every call with such a name gets the same error, callers
of one attempt included. No Triton is needed: these calls fail before the hop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conch.endpoint.disk import DiskCache
from conch.endpoint.fleet import Budgets, Fleet
from conch.endpoint.hop import TritonHop
from conch.endpoint.metrics import Metrics
from conch.endpoint.protocol import ValidationError
from conch.endpoint.sources import FolderSource


class CountedSource(FolderSource):
    fetched: list[str]

    def fetch(self, target_model: str, dest: Path) -> None:
        self.fetched.append(target_model)
        super().fetch(target_model, dest)


def fleet_on(tmp_path: Path) -> tuple[Fleet, CountedSource]:
    source = CountedSource(tmp_path / "src")
    object.__setattr__(source, "fetched", [])
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "broken.tar.gz").write_bytes(b"not a gzip stream")
    hop = TritonHop("http://127.0.0.1:9")  # never reached
    return Fleet(source, DiskCache(tmp_path / "disk"), hop, Metrics(), Budgets(), lambda: 0), source


def test_many_names_that_never_load_leave_no_entry_and_get_the_same_error_each_time(tmp_path: Path) -> None:
    async def main() -> None:
        fleet, _ = fleet_on(tmp_path)
        try:
            for index in range(200):
                name = f"made-up-{index}.tar.gz"
                for _ in range(2):  # the same answer every time
                    with pytest.raises(ValidationError, match=rf"Failed to download model data for TargetModel "
                                                              rf"'{name}': there is no object at "):
                        await fleet.acquire(name)
                assert len(fleet.models) == 0
            for _ in range(2):
                with pytest.raises(ValidationError, match=r"TargetModel 'broken.tar.gz'"):
                    await fleet.acquire("broken.tar.gz")
            assert fleet.models == {}
        finally:
            await fleet.hop.close()

    asyncio.run(main())


def test_callers_of_one_failing_attempt_all_get_its_error_from_one_fetch(tmp_path: Path) -> None:
    async def main() -> None:
        fleet, source = fleet_on(tmp_path)
        try:
            results = await asyncio.gather(*(fleet.acquire("missing.tar.gz") for _ in range(5)),
                                           return_exceptions=True)
            assert all(isinstance(r, ValidationError) and "'missing.tar.gz'" in str(r) for r in results)
            assert len({str(r) for r in results}) == 1 and source.fetched == ["missing.tar.gz"]
            assert fleet.models == {}
            with pytest.raises(ValidationError, match=r"TargetModel 'missing.tar.gz': there is no object"):
                await fleet.acquire("missing.tar.gz")  # a later call: a new attempt, the same error
            assert source.fetched == ["missing.tar.gz"] * 2
        finally:
            await fleet.hop.close()

    asyncio.run(main())
