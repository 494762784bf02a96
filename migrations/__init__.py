"""Marks migrations/ as the package data `pgmem.migrations` (setup.py maps it into the wheel), so
alembic finds its script location in an installed wheel: `alembic -c "$(pgmem migrate --alembic-ini)"`."""
