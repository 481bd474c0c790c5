"""`python -m fluxion_nb` runs the resource-query-compatible CLI."""

import sys

from fluxion_nb.cli import main

sys.exit(main())
