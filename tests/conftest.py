"""Shared fixtures. Fixture modules for real servers live beside this file."""

pytest_plugins = [
    "tests.fixtures_pg",
    "tests.fixtures_s3",
    "tests.fixtures_browser",
]
