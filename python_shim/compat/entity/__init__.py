"""Compatibility package for tool folders written for the original convention (`entity.messages`).

Like the `utils` package beside it, it comes last on sys.path, and a project's
own `entity` package wins; a namespace-package `entity` keeps its submodules
importable through the search path extended below.
"""

import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
