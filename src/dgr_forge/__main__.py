from dgr_forge.cli import main

main()
