"""Judging runs without running anything (the comparison and its decision rule, settling a case look by look, the stored baselines, expectations, the roofline's bound class)."""
