"""Step code of the local-MME tests that runs inside Triton (numpy only): a step that is still answering when
its server is killed."""

import time


def sleepy(x):
    time.sleep(60)
    return {"y": x}
