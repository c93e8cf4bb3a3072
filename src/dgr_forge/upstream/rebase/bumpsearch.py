"""The roller's search: the newest first-parent commit after the pin that the whole series
replays onto cleanly, and the one that breaks it. `TreeReplay` probes a candidate by the
replay engine in a scratch repository (the workspace's objects through alternates);
`search` bisects, verified by a real replay, narrowed again when one contradicts "once
broken, stays broken".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgr_forge.core.errors import BadInput, OperationFailed
from dgr_forge.core.gitutil import git, out
from dgr_forge.core.output import Reporter
from dgr_forge.upstream.rebase.conflicts import explain
from dgr_forge.upstream.rebase.state import PatchStep, UpstreamCommit, unique
from dgr_forge.upstream.replay import Replay
from dgr_forge.upstream.workspace import git_dir

BATCH_REF = "refs/dgr/bump/batch"  # the replays' one merge for many (a scratch repository)


def max_replays(candidates: int) -> int:
    """ceil(log2 n) + 2: the target, the bisection, the verifying replay."""
    return math.ceil(math.log2(candidates)) + 2 if candidates > 1 else 2


def candidates(src: Path, pin: str, target: str) -> list[str]:
    """The first-parent commits after the pin up to the target, oldest first."""
    if target == pin:
        return []
    if git(src, "merge-base", "--is-ancestor", pin, target, check=False).returncode != 0:
        raise BadInput(
            f"--to {target[:12]} is not a descendant of the pin {pin[:12]} (it is older, or on "
            "another branch): bump only moves the pin forward",
            hint="use `dgr-forge rebase --onto REV` to move the pin anywhere else",
            details={"pin": pin, "target": target},
        )
    listed = out(
        src, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{pin}..{target}"
    )
    return listed.split()


@dataclass(frozen=True)
class Break:
    """Why a candidate is not clean: the first patch that conflicts onto it."""

    commit: str
    patch: str
    files: list[str]
    upstream_commits: list[UpstreamCommit]

    @staticmethod
    def of(commit: str, step: PatchStep) -> Break:
        return Break(commit, step.file, list(step.files), unique(step.upstream_commits))


class TreeReplay:
    """Dry-run replays of the series (`patches`: (file, O_i) in order) onto candidates, in
    a scratch repository `repo`; one engine for all (close it). A break's upstream commits
    are named only when asked (`explained`): the search needs the first's alone."""

    def __init__(self, repo: Path, pin: str, patches: list[tuple[str, str]]) -> None:
        self.repo, self.pin, self.patches, self.runs = repo, pin, patches, 0
        self.engine = Replay(repo, [c for _, c in patches], git_dir(repo), batch_ref=BATCH_REF)
        self._merged: dict[str, tuple[str, str]] = {}  # candidate -> (merged tree, head)

    def close(self) -> None:
        self.engine.writer.close()

    def __call__(self, candidate: str) -> Break | None:
        """None when the whole series replays cleanly onto `candidate`."""
        self.runs += 1
        head = candidate
        for step in self.engine.onto(candidate):
            file = self.patches[step.index][0]
            if step.kind == "worktree":
                raise OperationFailed(
                    f"git merge-tree failed replaying {file} onto {candidate[:12]}: "
                    f"{step.error or 'a merge commit in the series'}",
                    hint="git 2.38 or newer is needed (`git --version`)",
                )
            if step.kind == "conflict":
                assert step.tree is not None
                self._merged[candidate] = (step.tree, head)
                return Break(candidate, file, step.files, [])
            head = step.commit or head
        return None

    def explained(self, b: Break) -> Break:
        """`b` with the upstream commits on its lines, as `rebase` names a conflict."""
        if b.commit not in self._merged:
            return b  # a real replay's break: named already
        merged, head = self._merged[b.commit]
        found = explain(self.repo, self.pin, b.commit, head, b.files, merged)
        return Break(
            b.commit, b.patch, b.files, unique(c for f in b.files for c in found.upstream[f])
        )


@dataclass
class SearchResult:
    newest_clean: int  # index into the candidates, -1 = the pin itself
    first_breaking: int | None
    breaks: dict[int, Break]
    replays: int  # dry-run probes + verifying replays
    verified: Any = None  # what the successful verifying replay returned


def search(
    n: int,
    probe: Callable[[int], Break | None],
    verify: Callable[[int], tuple[Break | None, Any]],
    out_: Reporter,
    real_probe: Callable[[int], Break | None] | None = None,
) -> SearchResult:
    """Candidates 0..n-1 (oldest first; -1 the pin, clean). The target first (the nightly
    case costs one probe), else bisection; the answer is replayed for real (`verify`).
    When that conflicts the probe was wrong: it counts as broken and the search narrows
    below it, from then on with `real_probe` (its other verdicts dropped)."""
    verdict: dict[int, Break | None] = {-1: None}
    replays = 0

    def test(i: int) -> bool:
        nonlocal replays
        if i not in verdict:
            replays += 1
            found = verdict[i] = probe(i)
            state = "clean" if found is None else f"breaks ({found.patch})"
            out_.info(f"  replay {replays}: candidate {i + 1}/{n}: {state}")
        return verdict[i] is None

    hi: int | None = None if test(n - 1) else n - 1
    while True:
        lo = max(i for i, v in verdict.items() if v is None and (hi is None or i < hi))
        if hi is not None:
            # a clean verdict above a broken one contradicts monotonicity: ignore it (the
            # oldest broken bounds the search, so the answer is never past a known break)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if test(mid):
                    lo = mid
                else:
                    hi = mid
        if lo < 0:
            return SearchResult(-1, hi, _breaks(verdict), replays)
        replays += 1
        broken, verified = verify(lo)
        if broken is None:
            return SearchResult(lo, hi, _breaks(verdict), replays, verified)
        out_.warn(
            f"the real replay onto candidate {lo + 1} conflicts ({broken.patch}) where the "
            "dry run found it clean: narrowing the search below it"
            + (" with real replays" if real_probe is not None and probe is not real_probe else "")
        )
        if real_probe is not None and probe is not real_probe:
            probe = real_probe
            verdict = {-1: None}
        verdict[lo] = broken
        hi = lo


def _breaks(verdict: dict[int, Break | None]) -> dict[int, Break]:
    return {i: b for i, b in verdict.items() if b is not None}
