"""``python -m pjrt_hub.backends.c_api.probe PATH [--json]``: probe a plugin library in this process."""

import sys

from . import _main

sys.exit(_main())
