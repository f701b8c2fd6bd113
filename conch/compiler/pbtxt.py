"""config.pbtxt text, both ways: render a ModelSpec into it (checked by parsing it back into Triton's ModelConfig
proto), and parse_config, the one function conch parses any config text with (the typed reader,
conch.compiler.config_reader, builds on it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from google.protobuf import text_format

from conch.ensembles.config import VersionPolicy
from conch.ensembles.layout import ModelSpec
from conch.ensembles.tensors import Tensor
from conch.errors import BuildError, ConfigParseError
from conch.templates import render

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2


def model_config_proto() -> ModuleType:
    """tritonclient.grpc.model_config_pb2 without running tritonclient.grpc's __init__, which imports gRPC
    and asyncio (about a third of an unchanged rebuild's imports); later imports of the package find it."""
    name = "tritonclient.grpc.model_config_pb2"
    if name not in sys.modules:
        import tritonclient

        path = Path(str(tritonclient.__file__)).parent / "grpc" / "model_config_pb2.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def render_config(spec: ModelSpec) -> str:
    """config.pbtxt for a model, parsed back through ModelConfig before it is returned."""
    text = render("config.pbtxt.j2", **_context(spec))
    if spec.settings.config_fields:  # never a field the template writes (refused at declaration)
        text += spec.settings.config_fields.text
    check_config(text, spec.name)
    return text


def parse_config(text: str | bytes, where: str) -> model_config_pb2.ModelConfig:
    """config.pbtxt text (or its UTF-8 bytes) as a ModelConfig: the one place conch parses a config's text;
    ``where`` names the file in the error (ConfigParseError)."""
    config = model_config_proto().ModelConfig()
    try:
        text_format.Parse(text.decode("utf-8") if isinstance(text, bytes) else text, config)
    except (UnicodeDecodeError, text_format.ParseError) as exc:
        raise ConfigParseError(f"{where}: does not parse as Triton's ModelConfig: {exc}", str(exc)) from exc
    return config


def check_config(text: str, expected_name: str) -> model_config_pb2.ModelConfig:
    """Parse config text into Triton's ModelConfig; a failure is a conch bug or a bad hand-written config."""
    try:
        parsed = parse_config(text, "config.pbtxt")
    except ConfigParseError as exc:
        raise BuildError(
            f"config.pbtxt of model {expected_name!r} does not parse as Triton's ModelConfig: {exc.reason}\n"
            f"--- rendered text ---\n{text}"
        ) from exc
    if parsed.name != expected_name:
        raise BuildError(f"config.pbtxt names model {parsed.name!r}, but its folder is {expected_name!r}")
    return parsed


def _tensor(t: Tensor) -> dict[str, Any]:
    return {
        "name": t.name,
        "data_type": t.dtype.triton,
        "dims": list(t.dims),
        "optional": t.optional,
        "reshape": None if t.reshape is None else list(t.reshape),
        "label_filename": t.label_filename,
    }


def _version_policy(policy: VersionPolicy | None) -> str | None:
    if policy is None:
        return None
    if policy.all:
        return "all: {}"
    if policy.specific:
        return "specific: { versions: [ " + ", ".join(str(v) for v in policy.specific) + " ] }"
    return f"latest: {{ num_versions: {policy.latest} }}"


def _warmups(spec: ModelSpec) -> list[dict[str, Any]]:
    out = []
    for w in spec.settings.warmups:
        inputs: list[dict[str, Any]] = []
        if w.inputs:  # read from files in warmup/: the tensors this step receives for the warmup payload
            inputs = [{"name": i.name, "data_type": i.dtype.triton, "dims": list(i.dims), "file": i.data_file}
                      for i in w.inputs]
        for t in () if w.inputs else spec.inputs:
            if any(d < 0 for d in t.dims):
                raise BuildError(
                    f"model {spec.name!r}: warmup {w.name!r} needs concrete dims, but input {t.name!r} has "
                    f"dims {list(t.dims)}; declare fixed dims or drop the warmup"
                )
            fill = "random_data" if w.random_data and t.dtype.wire != "BYTES" else "zero_data"
            inputs.append({"name": t.name, "data_type": t.dtype.triton, "dims": list(t.dims), "fill": fill,
                           "file": None})
        out.append({"name": w.name, "batch_size": w.batch_size, "count": w.count, "inputs": inputs})
    return out


def _context(spec: ModelSpec) -> dict[str, Any]:
    s = spec.settings
    return {
        "name": spec.name,
        "platform": spec.platform,
        "backend": spec.backend,
        "max_batch_size": s.max_batch_size,
        "version_policy": _version_policy(s.version_policy),
        "inputs": [_tensor(t) for t in spec.inputs],
        "outputs": [_tensor(t) for t in spec.outputs],
        "instance_groups": [{"kind": g.kind, "count": g.count, "gpus": list(g.gpus)} for g in s.instance_groups],
        "dynamic_batching": s.dynamic_batching,
        "parameters": sorted(s.parameters.items()),
        "warmups": _warmups(spec),
        "steps": [
            {
                "model_name": st.model_name,
                "model_version": st.model_version,
                "input_map": list(st.input_map),
                "output_map": list(st.output_map),
            }
            for st in spec.ensemble_steps
        ],
    }
