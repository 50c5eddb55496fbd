"""The gate, which judges a run against a baseline with re-measures and lockstep settling, and merges CI shards."""
