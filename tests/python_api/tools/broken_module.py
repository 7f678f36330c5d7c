"""A module that fails to import: it shows in catalog_errors()."""

raise ImportError("this module is broken on purpose")
