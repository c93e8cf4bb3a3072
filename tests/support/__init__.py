"""Shared test support: the test upstream (`git`), the one forge-root builder (`roots`),
running the CLI in-process or in a child process (`cli`), and the domain fixtures built on
them (`build`, `reports`, `server`, `cache`, `dist`: a loopback sccache-dist pool).

The tests import it as `support` (pytest's pythonpath has tests/); bench/ imports it as
`tests.support`, run from the repository root as `python -m bench.<name>`. Modules here
import each other relatively, so both names work. The older `forgetest` and `*_support`
modules re-export from here.
"""
