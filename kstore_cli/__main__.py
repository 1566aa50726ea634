from kstore_cli.cli import main

main()
