"""How the local MME names the step models of a TargetModel it stages (a module of its own, light enough for
the CLI's parser to take its choices from it)."""

from __future__ import annotations

import enum


class StepNames(enum.Enum):
    SHARED = "shared"  # keep every name as in the archive, what SageMaker's image does (the default)
    ISOLATE = "isolate"  # rename a TargetModel's steps when another uses their names: what `conch deploy` uploads
