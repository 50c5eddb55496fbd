"""perfgate's version (pyproject.toml says the same; tests/test_architecture.py checks): a leaf, so the
modules that record it import nothing above them."""

__version__ = "0.1.0"
