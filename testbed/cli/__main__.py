"""`python -m testbed.cli` is the `testbed` command."""
import sys

from testbed.cli import main

sys.exit(main())
