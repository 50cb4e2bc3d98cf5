"""A preload module that starts an OS thread at import: the zygote must refuse it."""

import threading
import time

threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
