"""Each command's `--json` keys, in the order docs/json.md shows them (see `cli.results` for
the shapes and how this is used; the upstream commands are in `cli.contract_source`)."""

from __future__ import annotations

from dgr_forge.cli.contract_models import (
    ARTIFACTS_MANIFEST,
    ARTIFACTS_MAP,
    ARTIFACTS_PROVISION,
    ARTIFACTS_VERIFY,
)
from dgr_forge.cli.contract_source import BUMP, CHECK, EXPORT, FETCH, PATCH, REBASE, STATUS
from dgr_forge.cli.results import (
    ARTIFACT,
    CACHE,
    COMMIT,
    DOCTOR_LANE,
    LAST_BUILD,
    SHA,
    VERIFICATION,
    Command,
    Form,
    arr,
    b,
    i,
    mapping,
    null,
    obj,
    s,
    strs,
)

DOCTOR_CACHE = obj(
    "what `build` would use now as compiler cache (from `DGR_CACHE` / `DGR_CACHE_MODE`, "
    "default `auto` / `rw`); never a credential: URLs are masked",
    {
        "choice": s(
            "`auto`, `ccache`, `sccache` or `off` (as asked; an unknown word is reported in "
            "`problem`)"
        ),
        "tool": null(s("`ccache` or `sccache`; null: no cache")),
        "launcher": null(s("the launcher's file name")),
        "path": null(s("where the launcher was found (absent when `problem` is set)")),
        "version": s('the tool\'s version (`""` when none)'),
        "backend": s(
            "`none`, `local`, or `local + remote <masked URL or backend kind>` (`|read-only` "
            "marks a read-only ccache remote)"
        ),
        "mode": s("`rw`, `ro` or `off`"),
        "distributed": null(s("the sccache-dist scheduler URL, masked")),
        "dist": null(
            obj(
                "with a scheduler: what it answered when asked with the client's token: "
                "`scheduler` (masked), `status` (`ok`, `no-servers`, `unauthorized`, "
                "`unreachable`, `error`, `unchecked`), `detail`, `fix` (null when ok), "
                "`servers`, `cpus` (null when unknown); never the token"
            )
        ),
        "tools": obj("per tool (`ccache`, `sccache`): `found`, `path`, `version`"),
        "problem": null(
            s(
                "why `build` would refuse the cache settings (exit 2 there), e.g. an explicit "
                "tool that is not installed"
            )
        ),
    },
    optional=("tool", "launcher", "path", "version", "backend", "mode", "distributed", "dist"),
)

BUILD_LANE = obj(
    "a lane's build",
    {
        "lane": s("the lane"),
        "status": s("`built`, `up-to-date` or `failed`"),
        "configured": b("CMake configured this run"),
        "patched": b("the series was applied this run"),
        "ninja_steps": i("Ninja steps run"),
        "artifacts": arr(ARTIFACT, "the artifacts, hashed"),
        "report": null(s("the signed report")),
        "report_reused": b(
            "an earlier report was kept: only when the lane's whole input digest (input "
            "files, patched tree, worker, programs, by content) is the one recorded with that "
            "report"
        ),
        "log": null(s("the `build-<lane>.log` link")),
        "log_file": null(s("this build's own log")),
        "build_dir": s("the lane's build directory"),
        "cache": CACHE,
        "timings": mapping({"type": "number"}, "seconds per phase"),
        "rebuilt": strs("artifacts found changed on disk and rebuilt (only when any)"),
        "error_lines": strs("a failed build's first error lines (only when failed)"),
    },
    optional=("rebuilt", "error_lines"),
)

BUILD = Command(
    "build",
    "Fetch + patch as needed, configure and build each lane; signed reports.",
    (
        Form(
            "build",
            {
                "upstream": obj(
                    "what was built",
                    {
                        "name": s("the upstream's name"),
                        "commit": s(COMMIT),
                        "series_digest": s("sha256 over the series"),
                    },
                ),
                "worker": null(s("the worker project")),
                "lanes": arr(BUILD_LANE, "per lane"),
                "error": s("a failed lane's build: which, and its log"),
            },
            optional=("error",),
            may_fail=True,
            note=(
                "exit 1 when a lane's build failed; a git worker checkout holding edits or "
                "commits of your own that a move would lose is exit 3 with `worker`, `dirty`, "
                "`local_commits` (`--force` saves them under logs/ first); a lane that cannot "
                "build here is exit 2 with `lanes` (`doctor` rows); a launcher in the generated "
                "rules other than the forge's choice, or an input file or program changed "
                "during the build, is exit 1 with `changed` (the paths) or `compile`/`link`/"
                "`code_check`/`chosen` (the launchers found, the one chosen), and no report; an "
                "ignored, untracked or modified file in the upstream or git-worker tree is "
                "exit 3 with `changes`"
            ),
        ),
    ),
)

LANES = Command(
    "lanes",
    "The lane matrix: backend, buildable here, last build, certified.",
    (
        Form(
            "lanes [--advertised]",
            {
                "lanes": arr(
                    obj(
                        "a lane",
                        {
                            "lane": s("the lane"),
                            "backend": s("the recipe's backend"),
                            "host_os": strs("the OSes it builds on"),
                            "buildable": b("it can build on this host"),
                            "missing": null(strs("what is missing")),
                            "last_build": LAST_BUILD,
                            "certified": b("a valid hardware certification"),
                            "certification": obj(
                                "`reason` (why not certified, or `valid`; why a certification "
                                "lapsed: recipe, pin, series, toolchain file, `cmake/` modules, "
                                "worker or the host's tool versions) and `record` (its `inputs`: "
                                "the bound `toolchain {path, sha256}`, `cmakeModules {name: "
                                "sha256}`, `worker`, `tools {name: version}`)"
                            ),
                        },
                    ),
                    "per lane",
                ),
                "advertised": strs("with `--advertised`: the certified lanes"),
            },
            optional=("advertised",),
        ),
    ),
)

DOCTOR = Command(
    "doctor",
    "This host: build tools, compilers, GPU toolkits, the compiler cache; which lanes build.",
    (
        Form(
            "doctor [--lane L]",
            {
                "host_os": s("`linux` or `darwin`"),
                "machine": s("e.g. `x86_64`"),
                "tools": arr(obj("a probe: `name`, `found`, `path`, `version`, ..."), "tools"),
                "libraries": arr(obj("a probe"), "libraries"),
                "compiler_launcher": null(s("the compiler launcher")),
                "cache": DOCTOR_CACHE,
                "lanes": arr(DOCTOR_LANE, "per lane (narrowed by `--lane`)"),
                "selected": strs("with `--lane`: the lanes asked for"),
                "unbuildable": strs("with `--lane`: those that cannot build here"),
            },
            optional=("selected", "unbuildable"),
            may_fail=True,
            note="with `--lane`, exit 1 when `unbuildable` is not empty; unknown lane: exit 2",
        ),
    ),
)

KEYGEN = Command(
    "keygen",
    "Create an Ed25519 signing key (PKCS#8 PEM, mode 0600) and PATH.pub.",
    (
        Form(
            "keygen",
            {
                "private_key": s("its path"),
                "public_key": s("the `.pub` path"),
                "keyid": s("the key id (sha256 of the public key)"),
            },
        ),
    ),
)

REPORT_SHOW = Command(
    "report show",
    "A signed build report, decoded.",
    (
        Form(
            "report show",
            {
                "summary": obj(
                    "the report at a glance: `report`, `payload_type`, `lane`, `recipe`, "
                    "`upstream`, `patches`, `toolchain`, `artifacts`, `signed_by`, `builder`, "
                    "`invocation_id`, `started_on`, `finished_on`"
                ),
                "statement": obj("the in-toto statement (SLSA provenance v1)"),
            },
        ),
    ),
)

REPORT_VERIFY = Command(
    "report verify",
    "Verify a report's signature (and with `--artifacts` its subjects on disk).",
    (
        Form(
            "report verify",
            dict(VERIFICATION["properties"]),
            may_fail=True,
            note="exit 1 when not verified",
        ),
    ),
)

REPORT_COMPARE = Command(
    "report compare",
    "Two reports of a lane: verified, and the same subjects?",
    (
        Form(
            "report compare",
            {
                "identical": b("same subjects, same digests"),
                "a": VERIFICATION,
                "b": VERIFICATION,
                "differences": arr(
                    obj(
                        "a subject that differs",
                        {
                            "name": s("the subject"),
                            "status": s("`changed`, `only_a`, `only_b`"),
                            "a": null(s("its digest in a")),
                            "b": null(s("its digest in b")),
                        },
                    ),
                    "per subject",
                ),
            },
            may_fail=True,
            note="exit 1 when a report does not verify or they differ",
        ),
    ),
)

CERTIFY = Command(
    "certify",
    "Record, signed, that this exact lane/recipe/report passed on real hardware.",
    (
        Form(
            "certify",
            {
                "certification": s("the record's path"),
                "file": s("the same"),
                "trusted": b("its key is in trusted-keys/"),
                "lane": s("the lane"),
                "recipe_sha256": s(SHA),
                "upstream_commit": s(COMMIT),
                "series_digest": s("sha256 over the series"),
                "report_sha256": s(SHA),
                "evidence_sha256": s(SHA),
                "hardware": obj("`description`, `probed`"),
                "certified_on": s("when (ISO 8601, UTC)"),
                "keyid": s("the signing key's id"),
                "inputs": obj(
                    "the inputs it binds besides recipe, pin and series",
                    {
                        "toolchain": null(obj("the toolchain file: `path`, `sha256`")),
                        "cmakeModules": mapping(s("sha256"), "`cmake/` modules by name"),
                        "worker": null(
                            obj("the worker: `location` + `commit`, or `location` + `tree`")
                        ),
                        "tools": null(
                            mapping(
                                s("version"),
                                "the host's tools the lane builds with (cmake, ninja, the "
                                "recipe's tools) by version; null where not probed",
                            )
                        ),
                    },
                ),
            },
        ),
    ),
)

MATRIX_ENTRY = obj(
    "a lane of the matrix (from its recipe)",
    {
        "lane": s("the file name (`cuda` for `recipes/cuda.toml`)"),
        "backend": s("`lane.backend`"),
        "runs_on": strs('`ci.runs_on` (runner labels; default `["ubuntu-latest"]`)'),
        "container": s(
            "`ci.container`, as `image@sha256:...` when `ci.image_digest` is set; present only "
            "when the recipe names one"
        ),
        "tools": strs("`requires.tools` (probe names from `toolchains/probes.toml`)"),
        "libraries": strs("`requires.libraries`"),
        "packages": strs("`ci.packages` (apt packages the CI job installs first)"),
        "gitlab_tags": strs("`ci.gitlab_tags` (GitLab runner tags)"),
        "runner_os": s("`linux` or `darwin`: which default GitLab image a lane gets"),
    },
    optional=("container",),
)

CI_MATRIX = Command(
    "ci matrix",
    "The lane matrix for CI.",
    (
        Form(
            "ci matrix",
            {
                "matrix": obj(
                    '`{"include": [ENTRY, ...]}`, one entry per `recipes/<lane>.toml`',
                    {"include": arr(MATRIX_ENTRY, "sorted by lane")},
                )
            },
        ),
    ),
    prose=(
        "Without `--json`, stdout is the bare matrix (ready for `fromJSON` or `jq`): "
        '`{"include": [ENTRY, ...]}`. With `--json` the same object is under `matrix`.'
    ),
)

_RENDER = {
    "provider": s("`github` or `gitlab`"),
    "lanes": strs("the lanes rendered, sorted"),
    "sha256": s("of the rendered workflow's bytes"),
    "install": s(
        "how every job installs dgr-forge: `checkout` (the tool's own repository: the "
        "checked-out tree), `requirements` (`ci/requirements.txt`, pinned by content) or "
        "`source` (`--tool-source`)"
    ),
    "install_args": s(
        "pip install's arguments in that step, e.g. `-c constraints.txt .` or "
        "`-c ci/constraints.txt -r ci/requirements.txt` (with `--tool-source`: "
        '`-c ci/constraints.txt "$DGR_TOOL_SOURCE"`, the requirement in the workflow\'s '
        "environment)"
    ),
    "constraints": s(
        "the constraints file the step installs under (`constraints.txt` or `ci/constraints.txt`)"
    ),
    "requirements": null(
        s("`ci/requirements.txt`; null in the tool's own repository and with `--tool-source`")
    ),
    "requirements_exist": b(
        "every file the install step reads exists (`--check` exits 1 otherwise)"
    ),
    "tool_source": null(
        s(
            "the pip requirement `--tool-source` gave (`dgr-forge==X`, `dgr-forge @ "
            "https://...whl#sha256=...`, `dgr-forge @ git+https://...@<commit>`); null without"
        )
    ),
}

CI_RENDER = Command(
    "ci render",
    "A CI workflow file from the recipes.",
    (
        Form("ci render", {**_RENDER, "workflow": s("the workflow text")}),
        Form(
            "ci render --out PATH",
            {
                **_RENDER,
                "path": s("the `--out` path"),
                "changed": b("the file was (re)written; false when already identical"),
                "written": strs(
                    "the files written because they were missing (`ci/constraints.txt` from "
                    "this environment; `ci/requirements.txt` only when this dgr-forge came "
                    "from a git commit)"
                ),
                "requirements_written": b("`ci/requirements.txt` was among them"),
            },
        ),
        Form(
            "ci render --check PATH",
            {**_RENDER, "path": s("the `--check` path"), "current": b("true")},
            note="a stale file is exit 1 (a failure) with the render's keys, `path`, "
            "`current: false` and `diff` (unified diff from the committed file to the rendering)",
        ),
    ),
)

PRESETS = Command(
    "presets",
    "The forge's CMake presets in `dgr-forge.presets.json`, included from "
    "`CMakeUserPresets.json` (the user's file keeps every other byte).",
    (
        Form(
            "presets",
            {
                "path": null(
                    s(
                        "the forge's presets file, `dgr-forge.presets.json` (null with "
                        "`--print` and `--remove`)"
                    )
                ),
                "presets": strs("the preset names (none with `--remove`)"),
                "content": obj("with `--print`: the presets file"),
                "user_presets": s("the `CMakeUserPresets.json` that includes it"),
                "user_presets_change": s(
                    "what happens to it: `created`, `changed` (the include entry added or "
                    "removed; a `version` under 4 raised to 4), `unchanged`, `deleted` (the "
                    "one the forge created, by `--remove`)"
                ),
                "diff": s('the change to it as a unified diff (`""`: none)'),
                "dry_run": b("`--dry-run`: nothing was written"),
            },
            optional=("content", "user_presets", "user_presets_change", "diff", "dry_run"),
        ),
    ),
)

DEMO = Command(
    "demo",
    "The tour without network: a generated upstream, series and worker in DIR.",
    (
        Form(
            "demo DIR",
            {
                "root": s("DIR: the demo forge root"),
                "upstream": s("the demo upstream's directory"),
                "pin": s(COMMIT),
                "onto": s("the newer upstream commit the dry run replays onto"),
                "patches": strs("file names"),
                "key": s("the demo key"),
                "public_key": s("its public key"),
                "steps": arr(
                    obj(
                        "a step",
                        {
                            "step": s(
                                "`fetch`, `patch`, `build`, `report verify`, `rebase --dry-run`"
                            ),
                            "command": strs("the argv, from `dgr-forge`"),
                            "exit_code": i("its exit code"),
                            "proved": s("one line"),
                        },
                    ),
                    "per step",
                ),
            },
            note="a step that does not end as expected is exit 1 with `step` and "
            "`step_exit_code`; a non-empty DIR is exit 2",
        ),
    ),
)

COMMANDS: tuple[Command, ...] = (
    FETCH,
    PATCH,
    STATUS,
    EXPORT,
    CHECK,
    BUILD,
    LANES,
    DOCTOR,
    REBASE,
    BUMP,
    KEYGEN,
    REPORT_SHOW,
    REPORT_VERIFY,
    REPORT_COMPARE,
    CERTIFY,
    CI_MATRIX,
    CI_RENDER,
    ARTIFACTS_MANIFEST,
    ARTIFACTS_MAP,
    ARTIFACTS_PROVISION,
    ARTIFACTS_VERIFY,
    PRESETS,
    DEMO,
)
