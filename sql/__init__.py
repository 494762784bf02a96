"""Marks sql/ as the package data `pgmem.sql` (setup.py maps it into the wheel): the SQL
source of truth is read with importlib.resources from a checkout and from an installed wheel."""
