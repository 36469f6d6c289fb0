"""``python -m weightsmith.cli`` runs the ``weightsmith`` command."""

import sys

from . import main

sys.exit(main())
