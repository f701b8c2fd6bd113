"""Where the time goes in an ensemble: per-step figures from Triton's statistics extension around a run,
the critical path through the DAG, the ensemble scheduler's share, and findings that each name their figure."""

from conch.harness.profile.dag import CriticalPath, Dag, critical_path, dag_of
from conch.harness.profile.figures import ModelFigures
from conch.harness.profile.findings import Finding
from conch.harness.profile.load import Body, Target
from conch.harness.profile.measure import Load, measure
from conch.harness.profile.profile_report import Profile, RunInfo, StepProfile
from conch.harness.profile.server_statistics import StatsEndpoint

__all__ = ["Body", "CriticalPath", "Dag", "Finding", "Load", "ModelFigures", "Profile", "RunInfo", "StatsEndpoint",
           "StepProfile", "Target", "critical_path", "dag_of", "measure"]
