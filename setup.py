"""The package list of the wheel, found rather than written: the repository root is the package
`etc` (pyproject.toml's package-dir), so every folder below it with an __init__.py is `etc.<folder>`.
Everything else about the project is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=["etc"] + [f"etc.{name}" for name in find_packages(".", exclude=["test", "test.*", "build", "build.*"])])
