"""The `--json` keys of the model artifact commands (`artifacts manifest|map|provision|
verify`); see `cli.results` for the shapes and `cli.contract` for the order."""

from __future__ import annotations

from dgr_forge.cli.results import SHA, Command, Form, arr, b, i, mapping, n, null, obj, s, strs

LAYERS = obj(
    "with `--layers` (or, for `verify`, the destination's record): the layers the files "
    "listed were chosen for",
    {
        "layers": s("merged layer ranges, e.g. `11-21`"),
        "first": b("the embeddings' files included (`--first`, or a range from layer 0)"),
        "last": b("the output head's files included (`--last`, or a range to the last layer)"),
    },
)
RECORD = obj(
    "with a layer map: what the destination records it was provisioned for (the union of "
    "every successful run's ranges)",
    {
        "model": s("the model's name"),
        "layers": s("layer ranges"),
        "first": b("the embeddings"),
        "last": b("the output head"),
    },
)

_FILES = {"model": s("the model's name"), "dest": s("the `--dest` directory")}

ARTIFACTS_PROVISION = Command(
    "artifacts provision",
    "Download a model's files: resumable, retried, verified, atomic.",
    (
        Form(
            "artifacts provision",
            {
                **_FILES,
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes, from the manifest"),
                            "sha256": s("the manifest's sha256: what it was verified against"),
                            "status": s(
                                "`present`, `downloaded` or `failed`; `planned` with `--dry-run`"
                            ),
                            "downloaded_bytes": i("bytes downloaded this run"),
                            "resumed_from": i("bytes of NAME.part reused"),
                            "restarts": i("times it started over from byte 0"),
                            "retries": i("retries"),
                            "error": null(s("why it failed")),
                        },
                    ),
                    "per file",
                ),
                "downloaded_bytes": i("total downloaded this run"),
                "seconds": n("time taken"),
                "failed": strs("the files that failed"),
                "split_problems": mapping(
                    strs("problems"),
                    "GGUF split problems per file, and headers contradicting the layer map",
                ),
                "layers": null(LAYERS),
                "bytes": i("the size of the files listed (the subset with `--layers`)"),
                "model_bytes": i("the size of the whole model"),
                "missing_bytes": i("what was still to download when the run began"),
                "dry_run": b("`--dry-run`: nothing was written, every file is `planned`"),
                "provisioned": null(RECORD),
            },
            may_fail=True,
            note="exit 1 when a file fails; a busy provision lock adds `lock` and `holder` to "
            "the error, a bad `DGR_ARTIFACTS_*` number `variable` and `value`",
        ),
    ),
)

ARTIFACTS_VERIFY = Command(
    "artifacts verify",
    "Check size, sha256 and GGUF split headers of every file.",
    (
        Form(
            "artifacts verify",
            {
                **_FILES,
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes, from the manifest"),
                            "status": s("`ok`, `missing` or `bad`"),
                            "ok": b("`status` is `ok`"),
                            "problems": strs("what is wrong (size, sha256, split header)"),
                            "sha256": null(s("what is on disk, when it was hashed")),
                        },
                    ),
                    "per file required (all, or those the layers checked need) or present",
                ),
                "bad": strs("the files not `ok`"),
                "bytes": i("total size of the files listed"),
                "seconds": n("time taken"),
                "layers": null(LAYERS),
                "serves": null(
                    obj(
                        "with a layer map: what the files that verified can serve",
                        {
                            "layers": s('layer ranges, e.g. `0-10,22-32` (`""`: none)'),
                            "first": b("the embeddings' files verified"),
                            "last": b("the output head's files verified"),
                        },
                    )
                ),
                "provisioned": null(RECORD),
            },
            may_fail=True,
            note="exit 1 when a file is not `ok`",
        ),
    ),
)

ARTIFACTS_MANIFEST = Command(
    "artifacts manifest",
    "A model manifest from the files in a directory.",
    (
        Form(
            "artifacts manifest",
            {
                "model": s("the model's name"),
                "manifest": s("where it was written"),
                "state": s("e.g. `written`"),
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "size": i("bytes"),
                            "sha256": s(SHA),
                            "url": s("credentials masked"),
                        },
                    ),
                    "per file",
                ),
                "total_size": i("bytes"),
                "block_count": null(i("with a layer map: the model's layers")),
            },
        ),
    ),
)

ARTIFACTS_MAP = Command(
    "artifacts map",
    "Add the layer map to a model manifest, from the split headers.",
    (
        Form(
            "artifacts map",
            {
                "model": s("the model's name"),
                "manifest": s("the manifest written"),
                "state": s("`updated` or `unchanged`"),
                "source": s("`dest` (files on disk) or `url` (headers by HTTP Range requests)"),
                "arch": null(s("`general.architecture`")),
                "block_count": null(i("`<arch>.block_count`: the model's layers")),
                "files": arr(
                    obj(
                        "a file",
                        {
                            "name": s("file name"),
                            "layers": null(s('layer ranges it holds tensors of (`""`: none)')),
                            "tensors": null(strs("its other tensor groups, e.g. `token_embd`")),
                            "header_bytes": i("header bytes read"),
                        },
                    ),
                    "per file (null `layers`/`tensors`: not a .gguf)",
                ),
                "header_bytes": i("header bytes read in all"),
                "requests": i("HTTP Range requests made"),
            },
        ),
    ),
)
