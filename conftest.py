"""Test-session settings for the whole repository."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# The `analyze` command reads and writes the columnar trace cache (analyzer/loading/cache.py) in the
# user's cache directory; tests running it must neither depend on nor fill the developer's cache.
_CACHE = tempfile.mkdtemp(prefix="analyzer-test-cache-")
os.environ["ANALYZER_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)
