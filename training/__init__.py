"""Training runs: the one runner for every family, the families' loops, checkpoints, loggers, seeding, config checks."""
