"""A preload module that takes long to import (FLEET_TEST_IMPORT_SLEEP seconds, default 30)."""

import os
import time

time.sleep(float(os.environ.get("FLEET_TEST_IMPORT_SLEEP", "30")))
