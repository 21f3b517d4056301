"""``python -m tests.jax_suite``: see :mod:`.run`."""

import sys

from .run import main

sys.exit(main())
