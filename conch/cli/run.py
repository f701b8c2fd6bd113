"""`conch run`: an ensemble's samples through its DAG in this process, no server, every step's tensors shown."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from conch.cli.console import document, result, say
from conch.cli.flags import Subcommands, add_ensemble_flags

if TYPE_CHECKING:
    from conch.ensembles.ensemble import Ensemble
    from conch.executor import StepTrace


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


def _tensor(array: np.ndarray) -> dict[str, Any]:
    from conch.ensembles.dtypes import DType

    return {"datatype": DType.of(array.dtype).wire, "shape": list(array.shape)}


def run_samples(ensemble: Ensemble, names: list[str] | None, values: int, release: str,
                found: list[dict[str, Any]] | None = None) -> bool:
    """Run the named samples (all when none are named); print each step; compare with the expected outputs.
    ``found`` receives one JSON-safe record per sample (steps, outputs, verdicts) for ``--json``."""
    from conch.ensembles.samples import compare
    from conch.executor import Executor, sample_inputs

    chosen = names or [s.name for s in ensemble.samples]
    if not chosen:
        say(f"conch: error: ensemble {ensemble.name!r} has no samples to run; declare one with ensemble.sample()")
        return False
    passed = True
    steps: list[dict[str, Any]] = []

    def on_step(trace: StepTrace) -> None:
        lines = [f"  step {trace.step} ({trace.kind}, model {trace.model_name}): {trace.millis:.1f} ms"]
        lines += [f"    in   {describe(name, array, values)}" for name, array in trace.inputs.items()]
        lines += [f"    out  {describe(name, array, values)}" for name, array in trace.outputs.items()]
        lines += [f"    DISAGREES: {problem}" for problem in trace.problems]
        result("\n".join(lines))
        steps.append({"step": trace.step, "kind": trace.kind, "model": trace.model_name,
                      "millis": round(trace.millis, 3), "problems": trace.problems,
                      "inputs": {k: _tensor(v) for k, v in trace.inputs.items()},
                      "outputs": {k: _tensor(v) for k, v in trace.outputs.items()}})

    with Executor(ensemble, release=release) as executor:
        for name in chosen:
            inputs = sample_inputs(ensemble, name)
            result(f"ensemble {ensemble.name}, sample {name!r}")
            for key, array in inputs.items():
                result(f"  input {describe(key, array, values)}")
            steps.clear()
            run = executor.run(inputs, intermediates=True, strict=False, on_step=on_step)
            sample = next(s for s in ensemble.samples if s.name == name)
            dtypes = {t.name: t.dtype for t in ensemble.output_specs()}
            outputs: dict[str, Any] = {}
            for out, want in sample.expected_arrays().items():
                check = sample.check_for(out, dtypes[out])
                verdict = compare(out, run.outputs[out], want, check)
                passed &= verdict.passed
                result(f"  output {describe(out, run.outputs[out], values)}\n"
                       f"    expected: {'ok' if verdict.passed else 'MISMATCH'} {verdict.detail} "
                       f"({check.describe()})")
                outputs[out] = {**_tensor(run.outputs[out]), "passed": verdict.passed, "detail": verdict.detail,
                                "check": check.describe()}
            passed &= not run.problems
            if found is not None:
                found.append({"ensemble": ensemble.name, "sample": name, "steps": list(steps), "outputs": outputs,
                              "problems": run.problems,
                              "passed": all(o["passed"] for o in outputs.values()) and not run.problems})
    return passed


def cmd_run(args: argparse.Namespace) -> int:
    from conch.builder.discover import discover

    ensembles = [e for e in discover(args.paths) if not args.only or e.name in args.only]
    if not ensembles:
        say("conch: error: no ensembles found; give .py files that declare conch.Ensemble objects at module level")
        return 2
    found: list[dict[str, Any]] = []
    ok = all([run_samples(e, args.sample, args.values, args.release, found) for e in ensembles])
    document({"passed": ok, "samples": found})
    return 0 if ok else 1


def register(sub: Subcommands) -> None:
    r = sub.add_parser("run", help="run samples through an ensemble in this process (no server), showing every step")
    r.add_argument("paths", nargs="+", type=Path, help="ensemble .py files or folders of them")
    r.add_argument("--sample", action="append", help="only this sample (repeatable; default: all)")
    r.add_argument("--values", type=int, default=6, help="how many values of each tensor to print (default 6)")
    add_ensemble_flags(r)
    r.set_defaults(func=cmd_run)
