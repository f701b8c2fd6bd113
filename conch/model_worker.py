"""A Python-backend model loaded and run as the stub does it (python_backend ``src/pb_stub.cc``: its folders on
``sys.path``, ``auto_complete_config``, ``initialize`` and ``finalize`` optional), in this process (``conch run``,
through conch.executor) or, run as a script, in a child process on another interpreter: the release's image
Python for the build's observe runs, where conch is not installed. So this file never imports conch, needs only
numpy and the standard library, and runs on every stub Python from 3.8. The child takes the paths of Triton's
``triton_python_backend_utils.py``, of conch's ``stub_types.py`` (what the stub adds to it from C++) and of the
stand-in bridge (whose ``.npz`` frames it speaks) as arguments, then one hello frame, then one frame per call."""

import importlib.util
import json
import os
import sys

PB_UTILS = "triton_python_backend_utils"
ERROR_RESPONSE = b"2"  # the model answered the request with an error (frames: the bridge's 0 ok, 1 failed)


class ContractError(Exception):
    """The model breaks Triton's Python model contract (Triton refuses it at load)."""


def import_file(path, module_name):
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_model(folder, version, name, config_json, module_name, import_model):
    """The model of ``folder/version/model.py`` loaded as the stub loads it; ``config_json`` is Triton's JSON of
    its config, ``import_model(path, module_name)`` imports model.py with ``triton_python_backend_utils`` in
    ``sys.modules``. Raises ContractError for a model Triton refuses, and whatever its code raises."""
    before = list(sys.path)  # a generated model.py prepends its folder: undone below, the stub's own entries kept
    added = [os.path.join(folder, version), folder]
    sys.path.extend(added)  # as the stub does, for the imports the model makes at load and at run time
    try:
        module = import_model(os.path.join(folder, version, "model.py"), module_name)
        model_class = module.TritonPythonModel
        auto_complete = getattr(model_class, "auto_complete_config", None)
        if auto_complete is not None:
            utils = sys.modules[PB_UTILS]
            completed = auto_complete(utils.ModelConfig(config_json))
            if not isinstance(completed, utils.ModelConfig):
                raise ContractError(f"{name}: auto_complete_config must return the pb_utils.ModelConfig it was "
                                    f"given (Triton refuses the model), got {type(completed).__name__}")
            config_json = json.dumps(completed.as_dict())
        instance = model_class()
        initialize = getattr(instance, "initialize", None)
        if initialize is not None:
            initialize({
                "model_name": name, "model_instance_name": f"{name}_0_0", "model_instance_kind": "CPU",
                "model_instance_device_id": "0", "model_repository": folder, "model_version": version,
                "model_config": config_json,
            })
    finally:
        sys.path[:] = [*before, *added]
    if not callable(getattr(instance, "execute", None)):
        raise ContractError(f"{name}: its TritonPythonModel has no execute(self, requests), which Triton calls "
                            "for every batch of requests; define it")
    return instance


def _failure(exc):
    """What the parent needs of an exception: its type, message and, for a missing module, the module."""
    found = {"type": type(exc).__name__, "message": str(exc), "contract": isinstance(exc, ContractError)}
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        found["module"] = exc.name
    return json.dumps(found).encode()


def _broken(responses, utils):
    """How ``execute``'s answer to one request breaks Triton's contract (conch.executor says it the same way)."""
    if not isinstance(responses, (list, tuple)) or len(responses) != 1:
        shape = type(responses).__name__ + (f" of {len(responses)}" if isinstance(responses, (list, tuple)) else "")
        return ("execute() must return a list of one pb_utils.InferenceResponse per request; for one request it "
                f"returned {shape}")
    if not isinstance(responses[0], utils.InferenceResponse):
        return (f"execute() returned {type(responses[0]).__name__} for a request; answer each request with a "
                "pb_utils.InferenceResponse")
    return ""


def _serve(utils_path, types_path, bridge_path):
    """The child: load the model of the hello frame, then answer one request per frame until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the model prints goes to the build's output, not into the frames
    stdin = sys.stdin.buffer
    bridge = import_file(bridge_path, "_conch_standin_bridge")
    utils = import_file(utils_path, PB_UTILS)
    stub_types = import_file(types_path, "_conch_stub_types")
    for name, kind in stub_types.STUB_TYPES.items():  # the stub adds these from C++
        if not hasattr(utils, name):
            setattr(utils, name, kind)
    sys.modules[PB_UTILS] = utils
    _tag, payload = bridge._read(stdin)
    try:
        hello = json.loads(payload.decode())
        sys.path[:0] = hello["paths"]  # the step's own environment, over the image's packages
        model = load_model(hello["folder"], hello["version"], hello["name"], hello["config"], "model", import_file)
        if hasattr(model, "check_dims"):  # conch's generated model.py: the parent reports dims its own way
            model.check_dims = False
    except Exception as exc:
        bridge._write(out, bridge._FAILED, _failure(exc))
        return
    bridge._write(out, bridge._OK, b"")
    while True:
        tag, payload = bridge._read(stdin)
        if tag is None:
            break
        try:
            responses = model.execute([utils.InferenceRequest(bridge._unpack(payload), hello["outputs"],
                                                              hello["name"])])
        except Exception as exc:
            bridge._write(out, bridge._FAILED, _failure(exc))
            continue
        broken = _broken(responses, utils)
        if broken:
            bridge._write(out, bridge._FAILED, json.dumps({"contract": True, "type": "", "message": broken}).encode())
        elif responses[0].has_error():
            bridge._write(out, ERROR_RESPONSE, responses[0].error().message().encode())
        else:
            arrays = {t.name(): t.as_numpy() for t in responses[0].output_tensors()}
            bridge._write(out, bridge._OK, bridge._pack(arrays))
    finalize = getattr(model, "finalize", None)
    if finalize is not None:
        finalize()


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]  # conch's own folder: its modules are not the model's to import
    try:
        _serve(*sys.argv[1:4])
    except BrokenPipeError:  # conch stopped listening (another step failed to load): nobody to answer
        os._exit(0)
