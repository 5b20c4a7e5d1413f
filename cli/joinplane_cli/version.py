"""The CLI's version: `joinplane --version`, the User-Agent, and cli/pyproject.toml's `version`."""

VERSION = "0.2.0"
