"""The package version (one place; imported by the CLI and the scaffold manifests)."""

__version__ = "0.1.0"
