"""Reading MME archives: the manifest, the safe extraction, `conch check` and its wiring and fleet checks,
`conch inspect`, and the one config reader every config.pbtxt goes through. Writing archives is
conch.builder's; this package never imports it, the harness, sagemaker or the CLI."""
