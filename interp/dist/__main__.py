import sys

from ..cli.dist import main

sys.exit(main())
