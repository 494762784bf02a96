"""`python -m pgmem` = the `pgmem` command."""

import sys

from pgmem.cli import main

sys.exit(main())
