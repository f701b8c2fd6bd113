"""python_backend's auto-complete shape (a model folder with `1/model.py` and no config.pbtxt) behind the local
MME, through boto3's sagemaker-runtime client: it loads and answers as Triton with SageMaker's flags serves it,
and the same model importing torch without an environment is refused, as the image's Python refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.exceptions
import numpy as np
import pytest
from mme_archives import runtime
from seed_archives import pack_repo
from single_models import AUTO_SUM_MODEL, auto_sum_repo

from conch.endpoint import LocalMME
from conch.wire import json_request

pytestmark = pytest.mark.integration


def test_an_auto_complete_archive_answers_through_the_local_mme_and_one_importing_torch_does_not(
        tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    pack_repo(auto_sum_repo(), source / "auto_sum.tar.gz")
    torch_model = AUTO_SUM_MODEL.replace(b"import numpy as np\n", b"import numpy as np\nimport torch\n")
    pack_repo({"auto_sum/1/model.py": torch_model}, source / "with_torch.tar.gz")
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((2, 4), np.float32)
    body, content_type = json_request({"INPUT0": a, "INPUT1": b})
    with LocalMME(source) as mme:
        rt = runtime(mme.url)
        response = rt.invoke_endpoint(EndpointName="local", TargetModel="auto_sum.tar.gz",
                                      ContentType=content_type, Body=body)
        outputs = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
                   for o in json.loads(response["Body"].read())["outputs"]}
        np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
        np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            rt.invoke_endpoint(EndpointName="local", TargetModel="with_torch.tar.gz", ContentType=content_type,
                               Body=body)
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationError"
    # Triton's own refusal first: auto-complete runs model.py on the image's Python, which has no torch
    assert ("TargetModel with_torch.tar.gz fails `conch check`: auto_sum/1/model.py: auto_complete_config fails on "
            "Python 3.10, so Triton refuses to load 'auto_sum'") in error["Message"], error["Message"]
    assert "No module named 'torch'" in error["Message"], error["Message"]
