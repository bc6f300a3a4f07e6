"""The worker runtime: a claim loop per process, and a supervisor that enforces hard timeouts."""
