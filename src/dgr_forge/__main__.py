from dgr_forge.cli.main import main

main()
