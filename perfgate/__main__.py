"""`python -m perfgate`: the command line (perfgate.cli)."""

from perfgate.cli import main

main()
