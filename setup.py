"""The wheel carries the SQL source of truth and the migrations (the build step).

`sql/`, `migrations/` and `examples/` stay at the top of the repository; they are mapped into the package
as `pgmem.sql`, `pgmem.migrations` and `pgmem.examples` (what `pgmem demo` reads), so an installed wheel (and an editable install) reads
them with importlib.resources. Everything else is configured in pyproject.toml."""

from setuptools import find_packages, setup

MAPPED = {"pgmem.sql": "sql", "pgmem.migrations": "migrations", "pgmem.examples": "examples"}
#: Folders of data files (no __init__.py) that setuptools would otherwise warn about.
DATA_PACKAGES = [
    "pgmem.migrations.versions",
    "pgmem.embedders.data",
    *(f"pgmem.sql.{folder}" for folder in ("citus", "downgrade", "idempotent", "incremental")),
]

setup(
    packages=[*find_packages(include=["pgmem", "pgmem.*"]), *MAPPED, *DATA_PACKAGES],
    package_dir=MAPPED,
)
