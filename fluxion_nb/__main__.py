"""`python -m fluxion_nb` runs the resource-query-compatible CLI."""

import sys

from fluxion_nb.cli import main

if __name__ == "__main__":
    sys.exit(main())
