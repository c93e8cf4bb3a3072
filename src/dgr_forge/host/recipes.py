"""Backend lane recipes: `recipes/<lane>.toml`, one declarative file per lane (its keys:
docs/inputs.md), read through `load_all`: a new recipe file is a new lane everywhere.
Option values are data, not CMake arguments (a safe character set; a list is a TOML
array); variables the forge sets itself, or that load code or name programs, are refused.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from dgr_forge.core.errors import BadInput
from dgr_forge.core.fsutil import sha256_bytes
from dgr_forge.core.tominput import Checker, NonEmpty, Record, Version1, about, decode, fail

LANE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
CMAKE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Option values: one CMake word, never a list separator, generator expression, variable
# reference or argument; lists are TOML arrays (joined with `;` by `_option`).
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.+:/=@,%^~-]*")
_MAX_VALUE = 1024
# Variables the forge sets (toolchain, make program, compilers, launchers, its own DGR_*)
# or that make CMake load a file: a recipe setting them would override the forge silently.
_FORGE_KEYS = re.compile(
    r"CMAKE_TOOLCHAIN_FILE|CMAKE_MAKE_PROGRAM|CMAKE_MODULE_PATH|CMAKE_GENERATOR\w*"
    r"|CMAKE_EXPORT_COMPILE_COMMANDS|CMAKE_\w+_COMPILER(_LAUNCHER)?|CMAKE_CUDA_HOST_COMPILER"
    r"|CMAKE_PROJECT_\w*INCLUDES?(_BEFORE)?|CMAKE_USER_MAKE_RULES_OVERRIDE\w*|DGR_\w*"
)
# Variables that name a program the build runs (or a place programs are found), or make it
# run one around each compile: programs belong in toolchains/, whose files are recorded;
# a launcher is the forge's choice alone (`--cache`), the upstream's own cache switch too.
_PROGRAM_KEYS = re.compile(
    r"\w*_LAUNCHER|CMAKE_(?:\w+_)?(?:AR|RANLIB|LINKER|NM|OBJCOPY|OBJDUMP|STRIP|ADDR2LINE"
    r"|READELF|DLLTOOL|MT)|CMAKE_\w*_(?:CLANG_TIDY|CPPCHECK|CPPLINT|INCLUDE_WHAT_YOU_USE"
    r"|LINK_WHAT_YOU_USE)\w*|CMAKE_\w*LINKER_TYPE|CMAKE_\w+_USING_LINKER_\w+|CMAKE_SYSROOT\w*"
    r"|CMAKE_CROSSCOMPILING_EMULATOR|CMAKE_(?:SYSTEM_)?PROGRAM_PATH|CMAKE_FIND_ROOT_PATH"
    r"|\w*(?:CCACHE|SCCACHE)\w*"
)
# Flag variables: each value is one compiler/linker word, never a response file or a flag
# that runs a program or reads a file the report does not record.
_FLAG_KEYS = re.compile(r"CMAKE_\w*FLAGS\w*|\w+_FLAGS")
_FILE_FLAGS = (
    "@", "-wrapper", "-specs", "--specs", "-B", "-fplugin", "--sysroot", "-isysroot",
    "-imacros", "-include", "-iprefix", "-iwithprefix", "-fuse-ld", "--ld-path", "-Xlinker",
    "-Wl,@", "-Wl,-plugin", "-Wl,--plugin", "-fprofile-use", "-fauto-profile",
)  # fmt: skip
TOOLCHAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
IMAGE_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# container image references and runner labels/tags: no whitespace, quotes or `$`
_CI_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@+-]*")
APT_PACKAGE = re.compile(r"[a-z0-9][a-z0-9.+-]*")
# GitLab.com's hosted runners (never GitHub's labels): by the lane's host OS
GITLAB_DEFAULT_TAGS = {  # in the order a lane's host OS picks them
    "linux": ("saas-linux-small-amd64",),
    "darwin": ("saas-macos-medium-m1",),
    "windows": ("saas-windows-medium-amd64",),
}


Words = tuple[str, ...]
# one option value: a CMake word (a bool is ON/OFF); a TOML array is a CMake list
OptionWord = Annotated[
    str | int | bool,
    about(
        "one CMake word (true/false: ON/OFF)",
        fix='one word per value, e.g. GGML_CUDA = "ON"; a CMake list is a TOML array: '
        'KEY = ["a", "b"]',
        problem="must be a string, integer or boolean",
    ),
]
CIWords = Annotated[Words, about("each a runner label, tag or package: no spaces, quotes or `$`")]


class Lane(Record, frozen=True):
    """What the lane is and where it builds."""

    backend: Annotated[
        NonEmpty, about("the backend's name, e.g. `CUDA`", fix='set backend = "CPU"')
    ]
    description: Annotated[str, about("one line for `lanes`")] = ""
    host_os: Annotated[Words, about("the hosts it builds on (`platform.system().lower()`)")] = (
        "linux",
        "darwin",
        "windows",
    )
    toolchain: Annotated[str, about("`toolchains/<name>.cmake`, by name")] | None = None


class CMake(Record, frozen=True):
    """What CMake is given: upstream's own option names."""

    options: Annotated[
        dict[str, OptionWord | list[OptionWord]],
        about(
            "`-DNAME=VALUE` per option; an array is a `;`-joined CMake list; never a "
            "variable the forge sets, a program, or a flag that reads a file",
            fix='write options = { GGML_CUDA = "ON" }',
        ),
    ] = {}  # noqa: RUF012 (msgspec copies an empty default)
    targets: Annotated[Words, about("the targets built (empty: CMake's default)")] = ()


class Requires(Record, frozen=True):
    """What the host must have: probe names from `toolchains/probes.toml`."""

    tools: Annotated[Words, about("tool probes")] = ()
    libraries: Annotated[Words, about("library probes")] = ()


class CI(Record, frozen=True):
    """How CI runs the lane."""

    runs_on: Annotated[CIWords, about("GitHub runner labels")] = ("ubuntu-latest",)
    container: Annotated[str, about("the job's container image")] | None = None
    image_digest: Annotated[str, about("`sha256:<64 hex>`: pull `container` by it")] | None = None
    gitlab_tags: (
        Annotated[CIWords, about("GitLab runner tags (default: hosted runners for the host OS)")]
        | None
    ) = None
    packages: Annotated[CIWords, about("apt packages the job installs first")] = ()
    certify_runs_on: Annotated[CIWords, about("a certify job's runner (with [certify])")] = ()


# -- `[certify]`: the lane's certification suite, one type, its keys, types and bounds
# declared once here; `certify.suite.load` checks what they mean (gates, placeholders, parsers)

PLACEHOLDERS = ("model", "device", "threads", "text")
DEFAULT_TIMEOUT = 600
MAX_TIMEOUT = 7200  # two hours: a whole op suite on a slow device, never unbounded
MAX_FAILED = 1_000_000
MAX_TS = 1e7
SPEEDS_FIX = "min_avg_ts = { prompt = 50.0, gen = 5.0 }"
MAX_REL_DIFF = 1.0
# tokens per second: a float (or an integer), never nan, inf, 0 or a string
Speed = Annotated[
    float,
    about(
        "tokens per second, at least",
        gt=0,
        le=MAX_TS,
        fix="{name} = 5.0",
        problem=f"{{value}} ({{type}}) is not a speed in (0, {MAX_TS:g}] t/s",
    ),
]


class Speeds(Record, frozen=True, kw_only=True):
    """A speed gate: the average tokens per second a run must reach."""

    prompt: Annotated[Speed, about("prompt processing")] | UnsetType = UNSET
    gen: Annotated[Speed, about("generation")] | UnsetType = UNSET


class Gate(Record, frozen=True, kw_only=True):
    """A step's gate: `max_failed`, `min_avg_ts` or `max_rel_diff` (only the keys it has)."""

    max_failed: (
        Annotated[
            int, about("the gate of a counting parser: failures allowed", ge=0, le=MAX_FAILED)
        ]
        | UnsetType
    ) = UNSET
    min_avg_ts: (
        Annotated[Speeds, about("the gate of `llama-bench`", fix=SPEEDS_FIX)] | UnsetType
    ) = UNSET
    max_rel_diff: (
        Annotated[
            float,
            about("the gate of `parity`: the most relative difference", ge=0, le=MAX_REL_DIFF),
        ]
        | UnsetType
    ) = UNSET


class Step(Gate, frozen=True, kw_only=True):
    """One program run and its gate."""

    name: Annotated[NonEmpty, about("the step's name, `[a-z0-9_-]`, unique")]
    program: Annotated[NonEmpty, about("one of `certify.targets`: a program the build made")]
    parser: Annotated[NonEmpty, about("how its output is read: a parser of `certify.parsers`")]
    args: Annotated[
        Words, about("its arguments, no shell; placeholders `{model}` `{device}` `{threads}`")
    ] = ()
    timeout: Annotated[int, about("seconds", ge=1, le=MAX_TIMEOUT)] = DEFAULT_TIMEOUT
    text: Annotated[str, about("a file of the forge root the step reads (`{text}`)")] | None = None
    reference: (
        Annotated[Literal["pin"], about("what a `parity` step compares with: the pin's build")]
        | None
    ) = None
    by_model: (
        Annotated[
            dict[str, Speeds],
            about(
                "a model's own speed gate, by model manifest name (`certify --model`)",
                fix="by_model.tiny = { prompt = 50.0, gen = 5.0 }",
            ),
        ]
        | None
    ) = None

    def gate(self, model: str | None) -> Gate:
        """The gate of a run with `model` (its own `by_model` speeds, else the step's)."""
        speeds = (self.by_model or {}).get(model or "", self.min_avg_ts)
        return Gate(max_failed=self.max_failed, min_avg_ts=speeds, max_rel_diff=self.max_rel_diff)


class Suite(Record, frozen=True):
    """`[certify]`: the lane's certification suite."""

    targets: Annotated[
        Words,
        about("the programs it runs, built with the lane", fix='targets = ["test-backend-ops"]'),
    ] = ()
    steps: Annotated[
        tuple[
            Annotated[Step, about("a step", fix="write each step as a [[certify.steps]] table")],
            ...,
        ],
        about("in order", fix="add one [[certify.steps]] table per program run"),
    ] = ()

    @property
    def needs_model(self) -> bool:
        return any("{model}" in a for s in self.steps for a in s.args)


class Recipe(Record, frozen=True):
    """`recipes/<lane>.toml`: one backend lane (the file's name is the lane's)."""

    LOADED = ("path", "shown", "sha256")
    schema: Version1
    lane: Annotated[Lane, about("the lane", fix='add [lane] with backend = "CPU"')]
    cmake: CMake = msgspec.field(default_factory=CMake)
    requires: Requires = msgspec.field(default_factory=Requires)
    ci: CI = msgspec.field(default_factory=CI)
    certify: Suite | None = None  # `certify.suite.load` checks it
    path: Path = msgspec.field(default_factory=Path)
    shown: str = ""  # how messages name the file
    sha256: str = ""  # of the file's bytes: reports and certifications bind to it

    @property
    def name(self) -> str:
        return self.path.stem

    @cached_property
    def cmake_options(self) -> dict[str, str]:
        """`[cmake] options` as CMake sees them, each checked."""
        return {k: _option(self.shown, k, v) for k, v in self.cmake.options.items()}

    @property
    def gitlab_tags(self) -> Words:
        """`ci.gitlab_tags`, by default GitLab's hosted runners for the lane's host OS."""
        if self.ci.gitlab_tags is not None:
            return self.ci.gitlab_tags
        found = (tags for os_, tags in GITLAB_DEFAULT_TAGS.items() if os_ in self.lane.host_os)
        return next(found, GITLAB_DEFAULT_TAGS["linux"])

    @property
    def image(self) -> str | None:
        """The container reference CI pulls: by digest when the recipe gives one."""
        container, digest = self.ci.container, self.ci.image_digest
        if container is None or digest is None:
            return container
        return f"{container.split('@', 1)[0]}@{digest}"

    def cmake_args(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in sorted(self.cmake_options.items())]


def load(path: Path, shown: str | None = None, *, root: Path | None = None) -> Recipe:
    """A recipe; `root`: the forge root it lies in (a link there is refused, never read)."""
    shown = shown or str(path)
    if not LANE_NAME.fullmatch(path.stem):
        raise fail(shown, "(file name)", f"{path.stem!r} is not a lane name", "use [a-z0-9_-] only")
    raw, data = Checker(shown).load(path, what="recipe", hint="check the path", root=root)
    recipe = decode(shown, data, Recipe, path=path, shown=shown, sha256=sha256_bytes(raw))
    _ = recipe.cmake_options  # checked first
    chain, ci, digest = recipe.lane.toolchain, recipe.ci, recipe.ci.image_digest
    for bad, key, problem, fix in (
        (chain is not None and not TOOLCHAIN_NAME.fullmatch(chain), "lane.toolchain",
         f"{chain!r} is not a file name in toolchains/ (no path, no '..')",
         'write toolchain = "gcc" for toolchains/gcc.cmake'),
        (digest is not None and not IMAGE_DIGEST.fullmatch(digest), "ci.image_digest",
         f"{digest!r} is not sha256:<64 hex>", "copy it from the registry"),
        (digest is not None and ci.container is None, "ci.image_digest", "without ci.container",
         "set ci.container too"),
        (ci.container is not None and not _CI_WORD.fullmatch(ci.container), "ci.container",
         f"{ci.container!r} is not an image name", "fix it"),
    ):  # fmt: skip
        if bad:
            raise fail(shown, key, problem, fix)
    _words(shown, "runs_on", ci.runs_on, _CI_WORD)
    _words(shown, "certify_runs_on", ci.certify_runs_on, _CI_WORD)
    if ci.certify_runs_on and recipe.certify is None:
        raise fail(
            shown,
            "ci.certify_runs_on",
            "a certify job for a lane without a [certify] suite",
            "add the lane's [certify] table, or remove certify_runs_on",
        )
    _words(shown, "gitlab_tags", recipe.gitlab_tags, _CI_WORD)
    _words(shown, "packages", ci.packages, APT_PACKAGE)
    return recipe


def _option(shown: str, name: str, value: str | int | bool | list[str | int | bool]) -> str:
    """A variable a recipe may set, one safe value (an array `;`-joined)."""
    key = f"cmake.options.{name}"
    if not CMAKE_NAME.fullmatch(name):
        raise fail(shown, key, "not a CMake variable name", "fix the name")
    if _FORGE_KEYS.fullmatch(name):
        raise fail(
            shown,
            key,
            "the forge sets this variable itself (or it loads CMake code); "
            "a recipe may not override it",
            'remove it; choose a toolchain with lane.toolchain = "<name in toolchains/>"',
        )
    if _PROGRAM_KEYS.fullmatch(name):
        raise fail(
            shown,
            key,
            "names a program the build would run (or where programs are found); the "
            "report records programs only through toolchain files",
            "remove it; set programs in a toolchain file under toolchains/ and name it "
            'with lane.toolchain = "<name>" (a compiler cache: --cache)',
        )
    fix = 'one word per value; write a CMake list as a TOML array: KEY = ["a", "b"]'
    if isinstance(value, list) and not value:
        raise fail(shown, key, "empty list", "remove the option or give values")
    items = value if isinstance(value, list) else [value]
    text = ";".join(_option_word(shown, key, v, isinstance(value, list), fix) for v in items)
    if _FLAG_KEYS.fullmatch(name):  # (`@loader_path` elsewhere is an rpath, not a file)
        for word in text.split(";"):
            check_flag_word(shown, key, word)
        if ";" in text:
            raise fail(
                shown,
                key,
                "a list: CMake passes a flags variable to the shell as one string, where "
                "';' separates commands",
                "give one flag per flags variable",
            )
    return text


def check_flag_word(shown: str, key: str, word: str) -> None:
    """Exit 2 for a word that makes the compiler or linker read a file or run a program."""
    if (bad := next((f for f in _FILE_FLAGS if word.startswith(f)), None)) is not None:
        raise fail(
            shown,
            key,
            f"{word[:40]!r}: {bad} makes the compiler or linker read a file or run a program "
            "the report does not record",
            "remove it; put programs and their settings in a toolchain file under toolchains/",
        )


def _words(shown: str, key: str, words: Words, pattern: re.Pattern[str]) -> None:
    for word in words:
        if not pattern.fullmatch(word) or len(word) > 200:
            raise fail(
                shown, f"ci.{key}", f"{word!r} is not allowed here", f"match {pattern.pattern}"
            )


def _option_word(shown: str, key: str, value: str | int | bool, in_list: bool, fix: str) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    if len(text := str(value)) > _MAX_VALUE:
        raise fail(shown, key, f"value too long ({len(text)} > {_MAX_VALUE})", fix)
    if in_list and not text:
        raise fail(shown, key, "empty list element", fix)
    if text.startswith("-"):
        raise fail(shown, key, f"{text[:40]!r}: leading '-' (a CMake argument)", fix)
    if not _SAFE_VALUE.fullmatch(text):
        bad = next(ch for ch in text if not _SAFE_VALUE.fullmatch(ch))
        control = ord(bad) < 32 or ord(bad) == 127
        what = "whitespace" if bad.isspace() else "a control character" if control else repr(bad)
        raise fail(shown, key, f"{text[:40]!r} contains {what}", fix)
    return text


def load_all(recipes_dir: Path, root: Path | None = None) -> dict[str, Recipe]:
    if not recipes_dir.is_dir():
        raise BadInput(f"{recipes_dir}: no recipes directory", hint="create recipes/<lane>.toml")
    recipes: dict[str, Recipe] = {}
    for path in sorted(recipes_dir.glob("*.toml")):
        shown = str(path.relative_to(root)) if root and path.is_relative_to(root) else str(path)
        recipes[path.stem] = recipe = load(path, shown, root=root)
        if root is None or recipe.lane.toolchain is None:
            continue
        # it may be a symlink, never to a file outside the root (missing: build's message)
        chain = root / "toolchains" / f"{recipe.lane.toolchain}.cmake"
        if chain.is_symlink() and not (real := chain.resolve()).is_relative_to(root.resolve()):
            raise fail(
                shown,
                "lane.toolchain",
                f"toolchains/{chain.name} is a symlink to {real}, outside the forge root",
                "commit the toolchain file itself under toolchains/",
            )
    return recipes


def select(recipes: dict[str, Recipe], lanes: list[str]) -> list[Recipe]:
    """The named lanes' recipes (none named: all); an unknown lane is exit 2."""
    if not lanes:
        return list(recipes.values())
    if unknown := [lane for lane in lanes if lane not in recipes]:
        raise BadInput(
            f"unknown lane {unknown[0]!r}",
            hint="known lanes: " + ", ".join(recipes) + " (one recipes/<lane>.toml each)",
            details={"lane": unknown[0]},
        )
    return [recipes[lane] for lane in lanes]
