"""The thin command line: global options, one module per command group."""
