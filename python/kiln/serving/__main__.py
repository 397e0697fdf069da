"""python -m kiln.serving MODEL [...]: the same as `kiln serve MODEL [...]`."""

import sys

from .cli import main

sys.exit(main())
