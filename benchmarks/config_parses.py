"""How often each config.pbtxt of an archive is parsed by `conch check` (one archive, and two as a fleet),
`conch inspect` and `conch stamp` (two names): every protobuf ``text_format.Parse`` in this process is counted,
told apart by model folder. One parse per config and command is the design; more is work done twice.

(These counts were tests until the suite's time was cut (issue 31): a test asserts behaviour a user relies on,
and a parse count is an optimisation, so it is measured here.)

    python benchmarks/config_parses.py

Prints the table and writes benchmarks/results/config_parses.json.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tarfile
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bench_steps
import numpy as np
from _common import finish
from google.protobuf import text_format

# A parse made by the renderer's check of its own text, or by the typed reader's round trip of what it read:
# not a parse of the archive's file.
RENDERED_BY = ("check_config", "_carry_what_differs")
ROUND_TRIP = "round trip"


def configs_of(archive: Path) -> dict[str, str]:
    """{config.pbtxt text: its model folder} of a built archive."""
    found = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            parts = member.name.removeprefix("./").split("/")
            fh = tar.extractfile(member) if member.isreg() and parts[1:] == ["config.pbtxt"] else None
            if fh is not None:
                found[fh.read().decode("utf-8")] = parts[0]
    return found


@contextmanager
def counted(*archives: Path) -> Iterator[Counter[str]]:
    """Parses inside the block as {model folder: count}; another text counts under "other"."""
    folders = {text: folder for a in archives for text, folder in configs_of(a).items()}
    parses: Counter[str] = Counter()
    parse = text_format.Parse

    def counting(text: Any, message: Any, *args: Any, **kwargs: Any) -> Any:
        key = text.decode("utf-8") if isinstance(text, bytes) else text
        rendered = any(frame.name in RENDERED_BY for frame in traceback.extract_stack())
        parses[ROUND_TRIP if rendered else folders.get(key, "other")] += 1
        return parse(text, message, *args, **kwargs)

    text_format.Parse = counting
    try:
        yield parses
    finally:
        text_format.Parse = parse


def small_archive(out: Path) -> Path:
    """X -> double -> double -> Z, built for production."""
    from conch import Ensemble, PythonStep, Tensor
    from conch.builder.repository_build import build_ensemble

    ens = Ensemble("parsed", max_batch_size=8)
    first = PythonStep("first", bench_steps.double, inputs=[Tensor("x", "FP32", [4])],
                       outputs=[Tensor("y", "FP32", [4])],
                       max_batch_size=8)
    second = PythonStep("second", bench_steps.double, inputs=[Tensor("x", "FP32", [4])],
                        outputs=[Tensor("y", "FP32", [4])],
                        max_batch_size=8)
    ens.output("Z", second(first(ens.input("X", "FP32", [4]))))
    x = np.ones((1, 4), np.float32)
    ens.sample("ones", {"X": x}, {"Z": x * 4})
    return build_ensemble(ens, out, "production")


def main() -> int:
    from conch.builder.stamping import stamp_archives
    from conch.cli import main as conch

    def quiet(argv: list[str]) -> Callable[[], object]:
        def run() -> object:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                return conch(argv)
        return run

    rows, data = [], {}
    with tempfile.TemporaryDirectory(prefix="conch-bench-parses-") as tmp:
        built = small_archive(Path(tmp) / "dist")
        copy = Path(tmp) / "copy.tar.gz"
        shutil.copyfile(built, copy)
        cases: dict[str, tuple[list[Path], Callable[[], object]]] = {
            "conch check (one archive)": ([built], quiet(["check", str(built)])),
            "conch check (two archives, one fleet)": ([built, copy], quiet(["check", str(built), str(copy)])),
            "conch inspect": ([built], quiet(["inspect", str(built)])),
            "stamp_archives (two names)": ([built], lambda: stamp_archives(built, ["p-a", "p-b"], Path(tmp) / "s")),
        }
        for name, (archives, run) in cases.items():
            with counted(*archives) as parses:
                run()
            configs = sum(len(configs_of(a)) for a in archives)
            of_files = sum(n for folder, n in parses.items() if folder not in (ROUND_TRIP, "other"))
            rows.append([name, configs, of_files, parses[ROUND_TRIP], parses["other"]])
            data[name] = {"configs": configs, "parses": dict(parses)}
    return finish("config_parses", ["command", "configs", "parses of them", "round trips", "other"], rows, data)


if __name__ == "__main__":
    raise SystemExit(main())
