"""``python -m tests.mutation``: see :mod:`.run`."""

import sys

from .run import main

sys.exit(main())
