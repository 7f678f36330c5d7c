"""Compatibility package for tool folders written for the original convention.

The shim puts this package's folder last on sys.path, so a project's own
regular `utils` package is found first and wins. A project whose `utils` is a
namespace package (a folder without __init__.py) would still lose to this
regular package, so its folders are added to this package's search path:
its submodules stay importable as `utils.<name>`.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
