"""The pinned upstream: manifest, workspace, fetch, patch series, export, rebase."""
