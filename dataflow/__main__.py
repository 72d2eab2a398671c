"""``python -m dataflow``: the ``ivmflow`` command line."""

import sys

from dataflow.cli import main

sys.exit(main())
