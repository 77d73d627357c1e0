"""`python -m service.cli`: the same program as `ett`."""

import sys

from . import main

sys.exit(main())
