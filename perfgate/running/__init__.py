"""Run orchestration on the manager's side (planning cases, launching and driving worker processes, both sides of --against, the environment record, GitHub output), with no torch."""
