"""The package version (one place; ``analyzer.__version__`` reads it)."""

__version__ = "0.1.0"
