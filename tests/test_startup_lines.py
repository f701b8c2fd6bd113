"""TensorFlow's native start-up lines are dropped from descriptor 2 while conch imports ensemble files and
TensorFlow; every other line passes, in order, and TensorFlow's numerics settings are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1795345448.519024   29413 port.cc:153] oneDNN custom operations are on. You may see slightly "
    "different numerical results due to floating-point round-off errors from different computation orders. To "
    "turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    "I0000 00:00:1795345417.460980   29389 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
    "available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
]


def test_only_the_startup_lines_are_dropped_and_the_rest_passes_in_order() -> None:
    script = textwrap.dedent(f"""
        import os, sys
        from conch.startup_lines import startup_lines_dropped
        startup = {STARTUP!r}
        print("before", file=sys.stderr, flush=True)
        with startup_lines_dropped():
            os.write(2, b"user line 1\\n")
            for line in startup:
                os.write(2, line.encode() + b"\\n")
            print("user line 2 mentions oneDNN and port.cc:1] but is the user's", file=sys.stderr)
            os.write(2, b"no newline at the end")
        print("", file=sys.stderr)
        print("after", file=sys.stderr)
        print("stdout untouched")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "TF_ENABLE_ONEDNN_OPTS": ""})
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "before", "user line 1", "user line 2 mentions oneDNN and port.cc:1] but is the user's",
        "no newline at the end", "after"]
    assert result.stdout == "stdout untouched\n"


def test_a_block_inside_another_adds_no_second_filter() -> None:
    script = textwrap.dedent(f"""
        import os, threading
        from conch.startup_lines import startup_lines_dropped
        with startup_lines_dropped():
            with startup_lines_dropped():  # as discover's import of each ensemble file within a command
                os.write(2, {STARTUP[0].encode()!r} + b"\\nuser line\\n")
                print(sum(t.name == "conch-startup-lines" for t in threading.enumerate()))
            os.write(2, {STARTUP[1].encode()!r} + b"\\n")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "user line\n"
    assert result.stdout == "1\n"


def test_importing_tensorflow_through_conch_prints_nothing_and_keeps_onednn_as_the_user_has_it() -> None:
    script = textwrap.dedent("""
        import os
        from conch.backends.tensorflow import _tensorflow
        tf = _tensorflow("probe")
        print(tf.__version__ != "", os.environ.get("TF_ENABLE_ONEDNN_OPTS"))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout == "True None\n"
