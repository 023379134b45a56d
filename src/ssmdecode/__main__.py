"""`python -m ssmdecode <subcommand>`."""

import sys

from ssmdecode.cli import main

sys.exit(main())
