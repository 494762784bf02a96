"""The lab: evaluation suites (`pgmem eval`) and benchmarks (`pgmem bench`, and the scripts
run as `python -m pgmem.lab.bench.<name>`).

The library never imports this package: the `pgmem` command loads it only when one of its
commands runs. Its own dependencies come with the `[eval]` extra."""

from __future__ import annotations

import importlib.util

from pgmem.errors import ConfigError

#: The modules the `[eval]` extra installs (plots and the fixed-size chunking baseline).
EVAL_MODULES = ("matplotlib", "langchain_text_splitters")


def require_eval_extra(command: str) -> None:
    """Refuse to start `command` when a package of the `[eval]` extra is missing, before any work."""
    for name in EVAL_MODULES:
        if importlib.util.find_spec(name) is None:
            raise ConfigError(f"{command} needs the [eval] extra (no package {name!r}): pip install 'pgmem[eval]'")
