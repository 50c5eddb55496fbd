from perfgate.cli import main

main()
