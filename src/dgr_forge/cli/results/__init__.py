"""The `--json` forms still written beside their data, until their commands return their
own Structs (as the others do: see `COMMANDS` in cli/schemas.py): `lanes`, `doctor`,
`toolchain install`, `rebase`, `bump` and `certify`. Each is a `core.structs.Form`."""
