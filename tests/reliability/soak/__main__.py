import sys

from tests.reliability.soak.run import main

sys.exit(main())
