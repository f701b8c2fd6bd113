"""DALI's serialized pipeline (``model.dali``) read and edited without DALI: its external sources and
outputs, the output types baked in from a step's declaration, and GPU operators rewritten for the CPU.

The schema below mirrors the fields conch touches of DALI's ``dali_proto.PipelineDef`` (the field
numbers are DALI's wire format); protobuf keeps fields it does not know, so the rest round-trips.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from conch.ensembles.dtypes import DType
from conch.errors import BuildError

# DALIDataType values (nvidia.dali.types) that Triton has a type for.
DALI_DTYPES = {
    0: DType.UINT8, 1: DType.UINT16, 2: DType.UINT32, 3: DType.UINT64, 4: DType.INT8, 5: DType.INT16,
    6: DType.INT32, 7: DType.INT64, 8: DType.FP16, 9: DType.FP32, 10: DType.FP64, 11: DType.BOOL,
}
_DTYPE_IDS = {dtype: key for key, dtype in DALI_DTYPES.items()}
_EXTERNAL_SOURCE_OPS = ("ExternalSource", "_ExternalSource")

# protobuf's FieldDescriptorProto type numbers
_STRING, _FLOAT, _INT64, _BOOL, _MESSAGE, _INT32 = 9, 2, 3, 8, 11, 5
_FIELDS: dict[str, list[tuple[str, int, int, bool, str | None]]] = {
    # message: [(field, number, type, repeated, message type)]
    "Argument": [
        ("name", 1, _STRING, False, None), ("type", 2, _STRING, False, None),
        ("floats", 3, _FLOAT, True, None), ("ints", 4, _INT64, True, None),
        ("strings", 5, _STRING, True, None), ("bools", 6, _BOOL, True, None),
        ("extra_args", 7, _MESSAGE, True, "Argument"), ("is_vector", 8, _BOOL, False, None),
    ],
    "InputOutput": [
        ("name", 1, _STRING, False, None), ("device", 2, _STRING, False, None),
        ("is_argument_input", 3, _BOOL, False, None), ("arg_name", 4, _STRING, False, None),
        ("dtype", 5, _INT32, False, None), ("ndim", 6, _INT32, False, None),
    ],
    "OpDef": [
        ("name", 1, _STRING, False, None), ("input", 2, _MESSAGE, True, "InputOutput"),
        ("output", 3, _MESSAGE, True, "InputOutput"), ("args", 4, _MESSAGE, True, "Argument"),
        ("inst_name", 5, _STRING, False, None), ("logical_id", 6, _INT32, False, None),
    ],
    "PipelineDef": [
        ("num_threads", 1, _INT64, False, None), ("batch_size", 2, _INT32, False, None),
        ("op", 5, _MESSAGE, True, "OpDef"), ("pipe_outputs", 7, _MESSAGE, True, "InputOutput"),
        ("device_id", 8, _INT32, False, None),
    ],
}
_PACKAGE = "conch_dali_pipeline"


@cache
def _pipeline_class() -> Any:
    """The PipelineDef message class, built once in a private descriptor pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field_proto = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name=f"{_PACKAGE}.proto", package=_PACKAGE, syntax="proto2")
    for message, fields in _FIELDS.items():
        m = proto.message_type.add(name=message)
        for field, number, kind, repeated, type_name in fields:
            label = field_proto.LABEL_REPEATED if repeated else field_proto.LABEL_OPTIONAL
            f = m.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.PipelineDef"))


@dataclass(frozen=True)
class PipelineTensor:
    """An external source or a pipeline output; dtype/ndim are None where the pipeline leaves them open."""

    name: str
    dtype: DType | None
    ndim: int | None
    device: str = "cpu"


def dtype_id(dtype: DType) -> int:
    """DALI's DALIDataType value for a Triton dtype."""
    return _DTYPE_IDS[dtype]


def parse(data: bytes, step: str) -> Any:
    """The PipelineDef message of serialized pipeline bytes."""
    from google.protobuf.message import DecodeError

    try:
        pipeline = _pipeline_class().FromString(data)
    except DecodeError as exc:
        raise BuildError(f"dali step {step!r}: model.dali is not a serialized DALI pipeline: {exc}") from exc
    if not pipeline.op:
        raise BuildError(f"dali step {step!r}: model.dali holds no operators; is it a serialized DALI pipeline?")
    return pipeline


def _argument(op: Any, name: str) -> Any:
    return next((a for a in op.args if a.name == name), None)


def _dtype(value: int | None) -> DType | None:
    return None if value is None or value < 0 else DALI_DTYPES.get(value)


def external_sources(data: bytes, step: str) -> list[PipelineTensor]:
    """The pipeline's inputs: its external_source operators, by the name Triton inputs must carry."""
    found = []
    for op in parse(data, step).op:
        if op.name not in _EXTERNAL_SOURCE_OPS or not op.output:
            continue
        dtype, ndim = _argument(op, "dtype"), _argument(op, "ndim")
        device = _argument(op, "device")
        found.append(PipelineTensor(
            op.output[0].name,
            _dtype(int(dtype.ints[0])) if dtype is not None and dtype.ints else None,
            int(ndim.ints[0]) if ndim is not None and ndim.ints else None,
            device.strings[0] if device is not None and device.strings else "cpu",
        ))
    return found


def outputs(data: bytes, step: str) -> list[PipelineTensor]:
    """The pipeline's outputs in order (DALI's Triton backend matches config outputs by position)."""
    found = []
    for out in parse(data, step).pipe_outputs:
        dtype = _dtype(out.dtype) if out.HasField("dtype") else None
        ndim = out.ndim if out.HasField("ndim") and out.ndim >= 0 else None
        found.append(PipelineTensor(out.name, dtype, ndim, out.device or "cpu"))
    return found


def declare_outputs(data: bytes, declared: list[tuple[DType, int]], step: str) -> bytes:
    """The pipeline with each output's dtype and ndim set, so that DALI checks them when it runs (on the
    server and in the local stand-in) instead of handing Triton a tensor of another type."""
    pipeline = parse(data, step)
    for out, (dtype, ndim) in zip(pipeline.pipe_outputs, declared, strict=True):
        out.dtype = _DTYPE_IDS[dtype]
        out.ndim = ndim
    result: bytes = pipeline.SerializeToString(deterministic=True)
    return result


def on_cpu(data: bytes, step: str) -> bytes:
    """The pipeline with every GPU and mixed operator (and GPU tensor) moved to the CPU: the same graph
    the local stand-in can run without a GPU. Operators that have no CPU version fail when DALI builds it."""
    pipeline = parse(data, step)
    for op in pipeline.op:
        device = _argument(op, "device")
        if device is not None:
            device.strings[:] = ["cpu" if s in ("gpu", "mixed") else s for s in device.strings]
        for io in (*op.input, *op.output):
            if io.device == "gpu":
                io.device = "cpu"
    for io in pipeline.pipe_outputs:
        if io.device == "gpu":
            io.device = "cpu"
    result: bytes = pipeline.SerializeToString(deterministic=True)
    return result


def gpu_operators(data: bytes, step: str) -> list[str]:
    """Names of the operators that run on a GPU ('gpu' or 'mixed' device)."""
    names = []
    for op in parse(data, step).op:
        device = _argument(op, "device")
        if device is not None and any(s in ("gpu", "mixed") for s in device.strings):
            names.append(op.name)
    return names
