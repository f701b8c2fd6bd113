"""Where the time goes in an ensemble: per-step figures from Triton's statistics extension around a run,
the critical path through the DAG, the ensemble scheduler's share, and findings that each name their figure."""
