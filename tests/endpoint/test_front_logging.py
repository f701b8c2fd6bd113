"""Starting the local MME front leaves the process's logging alone. uvicorn's default log config runs
``logging.config.dictConfig``, which flushes and closes every handler of the process; absl's handler
(TensorFlow's logging) then closes the stream it holds unless that is ``sys.stderr`` at that moment: pytest's
capture file (so `pytest tests/builder/test_dag_property.py tests/sagemaker/test_stamped_fleet.py` died with
"lost sys.stderr"), or the output of a notebook that serves and imported TensorFlow before."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from conch.endpoint import LocalMME

pytestmark = pytest.mark.integration


def test_starting_the_local_mme_closes_no_logging_handler_of_the_process(tmp_path: Path) -> None:
    absl_logging = pytest.importorskip("absl.logging")
    held = io.StringIO()  # the stream absl's handler took at import: here not sys.stderr, as under pytest's capsys
    bystander = logging.getLogger("conch-tests.bystander")
    handlers = [absl_logging.PythonHandler(held), logging.FileHandler(tmp_path / "user.log")]
    for handler in handlers:
        bystander.addHandler(handler)
    try:
        (tmp_path / "models").mkdir()
        with LocalMME(tmp_path / "models"):
            pass
        assert not held.closed, "starting the front closed the stream of a logging handler it does not own"
        assert handlers[1].stream is not None, "starting the front closed the user's log file"
    finally:
        for handler in handlers:
            bystander.removeHandler(handler)
            handler.close()
