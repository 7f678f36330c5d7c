"""Fails at import time: the catalog lists it under errors."""

raise RuntimeError("this module refuses to load")
