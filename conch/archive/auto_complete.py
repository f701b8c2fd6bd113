"""A Python model's ``auto_complete_config`` run as Triton runs it for a model folder without config.pbtxt
(python_backend ``src/pb_stub.cc``, AutoCompleteModelConfig: the model's folders and the backend's on
``sys.path``, the class's static ``auto_complete_config`` given a ``pb_utils.ModelConfig`` of the config so far,
which it must return).
Run as a script by the Python that judges it (a JSON request on stdin, a JSON answer on stdout), so it imports
the standard library only (triton_python_backend_utils, which needs numpy, is the model's own import) and keeps
to Python 3.8's syntax."""

import importlib.util
import json
import sys
import traceback


def complete(request):
    """``{"config": dict}`` (the completed config), ``{"error": message}`` (the model fails auto-complete, as Triton
    would refuse it) or ``{"setup": message}`` (this Python cannot run it: triton_python_backend_utils does not
    import here)."""
    sys.path.extend([request["version_dir"], request["model_dir"], request["backend_dir"]])
    try:
        import triton_python_backend_utils as pb_utils
    except Exception as exc:  # e.g. no numpy in this Python
        return {"setup": f"{type(exc).__name__}: {exc}"}
    try:
        spec = importlib.util.spec_from_file_location(f"{request['version']}.model", request["model_py"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model_class = module.TritonPythonModel
        config = pb_utils.ModelConfig(json.dumps(request["config"]))
        auto_complete = getattr(model_class, "auto_complete_config", None)
        if auto_complete is not None:
            config = auto_complete(config)
        if not isinstance(config, pb_utils.ModelConfig):
            return {"error": "auto_complete_config must return a valid pb.ModelConfig object (it returned "
                             f"{type(config).__name__})"}
        return {"config": config.as_dict()}
    except BaseException as exc:
        lines = traceback.format_exception_only(type(exc), exc)
        return {"error": "".join(lines).strip()}


if __name__ == "__main__":
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    answer = complete(json.load(sys.stdin))
    answer["python"] = version
    sys.stdout.write("\n" + json.dumps(answer))
