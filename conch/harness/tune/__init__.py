"""`conch tune`: settings per step (instances, dynamic batching, backend threads) for one ensemble or several
sharing one endpoint, found by a guided search on the real server under a p99 target, and written back as a
patch to the declaration."""

from conch.harness.tune.declaration import Patch, patch_declaration
from conch.harness.tune.search import Outcome, Round, exhaustive, guided
from conch.harness.tune.space import Knobs, Levels, Settings, StepSpace, grid, grid_size
from conch.harness.tune.trial import Trial, TrialServer, Workload

__all__ = ["Knobs", "Levels", "Outcome", "Patch", "Round", "Settings", "StepSpace", "Trial", "TrialServer",
           "Workload", "exhaustive", "grid", "grid_size", "guided", "patch_declaration"]
