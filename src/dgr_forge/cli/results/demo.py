"""The `--json` form of demo."""

from __future__ import annotations

from typing import Annotated

from dgr_forge.cli.results.base import COMMIT, Form, Nested, Strs, d


class DemoStep(Nested, kw_only=True):
    """a step"""

    step: Annotated[str, d("`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`")]
    command: Annotated[Strs, d("the argv, from `dgr-forge`")]
    exit_code: Annotated[int | None, d("its exit code (null: it did not run)")]
    proved: Annotated[str, d("one line")]


class Demo(Form, kw_only=True):
    title = "demo DIR"
    note = (
        "a step that does not end as expected is exit 1 with `step` and `step_exit_code`; a "
        "non-empty DIR is exit 2"
    )

    root: Annotated[str, d("DIR: the demo forge root")]
    upstream: Annotated[str, d("the demo upstream's directory")]
    pin: Annotated[str, COMMIT]
    onto: Annotated[str, d("the newer upstream commit the dry run replays onto")]
    patches: Annotated[Strs, d("file names")]
    key: Annotated[str, d("the demo key")]
    public_key: Annotated[str, d("its public key")]
    steps: Annotated[list[DemoStep], d("per step")]
