"""The memory a local MME's models cost: PSS of tritonserver and every process it started (its Python
stubs), so pages shared between stubs count once across them."""

from __future__ import annotations

import psutil


def tree_pss(pid: int) -> int:
    """Bytes of proportional set size of ``pid`` and its descendants (0 if it is gone)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except psutil.Error:  # a stub that exited meanwhile, or a process we may not read
            continue
    return total
