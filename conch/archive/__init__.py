"""Reading MME archives: the manifest, the safe extraction, `conch check` (Triton's load rules, what a release
changes) and its fleet check, `conch inspect`, and the one config reader every config.pbtxt goes through. Writing
archives is conch.builder's; this package never imports it, the local server, sagemaker or the CLI."""
