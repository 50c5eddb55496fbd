"""Exporters: a run (and its comparison) out to files a person or a tool reads."""
