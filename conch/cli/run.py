"""`conch run`: an ensemble's samples through its DAG in this process, no server, every step's tensors shown."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from conch.cli.console import say
from conch.cli.local import common

if TYPE_CHECKING:
    from conch.ensembles.ensemble import Ensemble
    from conch.run import StepTrace


def describe(name: str, array: np.ndarray, values: int) -> str:
    """One line for a tensor: name, dtype, shape and its first few values."""
    from conch.ensembles.dtypes import DType

    flat = array.ravel()[:values]
    if array.dtype == object:
        shown = " ".join(_short(bytes(v)) for v in flat)
    elif array.dtype.kind == "f":
        shown = " ".join(f"{v:.4g}" for v in flat)
    else:
        shown = " ".join(str(v) for v in flat)
    more = " ..." if array.size > values else ""
    return f"{name:28} {DType.of(array.dtype).wire:6} {list(array.shape)!s:14} {shown}{more}"


def _short(value: bytes, width: int = 32) -> str:
    try:
        text = repr(value.decode())
    except UnicodeDecodeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 4] + "...'"


def print_step(trace: StepTrace, values: int) -> None:
    print(f"  step {trace.step} ({trace.kind}, model {trace.model_name}): {trace.millis:.1f} ms")
    for name, array in trace.inputs.items():
        print(f"    in   {describe(name, array, values)}")
    for name, array in trace.outputs.items():
        print(f"    out  {describe(name, array, values)}")
    for problem in trace.problems:
        print(f"    DISAGREES: {problem}")


def run_samples(ensemble: Ensemble, names: list[str] | None, values: int, release: str) -> bool:
    """Run the named samples (all when none are named); print each step; compare with the expected outputs."""
    from conch.ensembles.samples import compare
    from conch.run import Executor, sample_inputs

    chosen = names or [s.name for s in ensemble.samples]
    if not chosen:
        say(f"conch: ensemble {ensemble.name!r} has no samples to run; declare one with ensemble.sample()")
        return False
    passed = True
    with Executor(ensemble, release=release) as executor:
        for name in chosen:
            inputs = sample_inputs(ensemble, name)
            print(f"ensemble {ensemble.name}, sample {name!r}")
            for key, array in inputs.items():
                print(f"  input {describe(key, array, values)}")
            result = executor.run(inputs, intermediates=True, strict=False,
                                  on_step=lambda trace: print_step(trace, values))
            sample = next(s for s in ensemble.samples if s.name == name)
            dtypes = {t.name: t.dtype for t in ensemble.output_specs()}
            for out, want in sample.expected_arrays().items():
                check = sample.check_for(out, dtypes[out])
                verdict = compare(out, result.outputs[out], want, check)
                passed &= verdict.passed
                print(f"  output {describe(out, result.outputs[out], values)}")
                print(f"    expected: {'ok' if verdict.passed else 'MISMATCH'} {verdict.detail} "
                      f"({check.describe()})")
            passed &= not result.problems
    return passed


def cmd_run(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover

    ensembles = [e for e in discover(args.paths) if not args.only or e.name in args.only]
    if not ensembles:
        say("conch: no ensembles found")
        return 2
    ok = all([run_samples(e, args.sample, args.values, args.release) for e in ensembles])
    return 0 if ok else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("run", help="run samples through an ensemble in this process (no server), showing every step")
    r.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    r.add_argument("--sample", action="append", help="only this sample (repeatable; default: all)")
    r.add_argument("--values", type=int, default=6, help="how many values of each tensor to print (default 6)")
    common(r)
    r.set_defaults(func=cmd_run)
