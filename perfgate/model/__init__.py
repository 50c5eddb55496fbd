"""The data model everything above reads and writes (a run's results, its settings from [tool.perfgate], expectation rules, acknowledgements, the environment keys)."""
