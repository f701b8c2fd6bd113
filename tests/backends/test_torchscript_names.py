"""model.pt bytes do not depend on what the saving process compiled before: TorchScript's mangled type
names (``___torch_mangle_N``) and a scripted module's constant order (Python's string hashing) are made
canonical, and the saved model still loads and answers as the module it was saved from."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch_mangling
import torch_modules

from conch.backends.pytorch import torchscript_bytes

FIXTURES = Path(__file__).parents[1] / "fixtures"
FRESH = ("import sys; sys.path.insert(0, sys.argv[1]); import torch_mangling;"
         "from conch.backends.pytorch import torchscript_bytes;"
         "sys.stdout.buffer.write(torchscript_bytes(torch_mangling.model()))")


def fresh_process_bytes(hash_seed: str) -> bytes:
    result = subprocess.run([sys.executable, "-c", FRESH, str(FIXTURES)], capture_output=True, timeout=300,
                            env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout


def test_a_model_saved_after_other_compiles_is_the_bytes_a_fresh_process_saves() -> None:
    torch_modules.affine()  # another Linear first: this process's next Linear types are mangled
    torch_mangling.model()  # and this model's own types once already
    module = torch_mangling.model()
    here = torchscript_bytes(module)
    assert b"___torch_mangle_" in torch_jit_save(module), "the model's own names are not mangled"
    assert here == fresh_process_bytes("1") == fresh_process_bytes("2")
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    loaded = torch.jit.load(io.BytesIO(here))
    np.testing.assert_array_equal(loaded(x).detach().numpy(), module(x).detach().numpy())


def torch_jit_save(module: object) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()
