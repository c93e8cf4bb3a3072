"""Model artifacts: model manifests, resumable downloads, verification, split GGUF."""
