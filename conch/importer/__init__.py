"""`conch import`: existing Triton model repositories and MME archives into conch declarations."""
