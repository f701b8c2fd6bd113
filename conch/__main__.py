"""`python -m conch`: the same as the `conch` command (the one the install puts on PATH)."""

import sys

from conch.cli import main

sys.exit(main())
