"""A plugin worker (isolation ``process``): ``python -m toolhost._worker --library LIB …``.

toolhost starts one per isolated plugin; it serves that plugin's calls and exits when the
host goes. Not for direct use.
"""

import sys

from toolhost import _native

_native.plugin_worker(sys.argv[1:])
