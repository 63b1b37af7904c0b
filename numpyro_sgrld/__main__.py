"""``python -m numpyro_sgrld``, the ``sgrld`` command: :func:`numpyro_sgrld.app.cli.main`."""

import sys

from numpyro_sgrld.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
