"""Shared test support: the test upstream (`git`), the one forge-root builder (`roots`),
running the CLI in-process or in a child process (`cli`), and the domain fixtures built on
them (`build`, `reports`, `server`, `cache`, `dist`: a loopback sccache-dist pool;
`daemon`: the upstream served by `git daemon`; `patches`: a series made with plain git;
`rebase`: a root with a three-patch series for the rebase and check tests; `snapshot`:
a tree copied once and put back at its own path for each test, as `build`'s built lane
and `demo`'s toured root are).

The tests import it as `support` (pytest's pythonpath has tests/); bench/ imports it as
`tests.support`, run from the repository root as `python -m bench.<name>`. Modules here
import each other relatively, so both names work. It is the one place for test helpers:
a test imports each name from the module that defines it.
"""
