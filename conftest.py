"""Root conftest: makes the shared golden-list helpers importable as ``tests.golden``."""
