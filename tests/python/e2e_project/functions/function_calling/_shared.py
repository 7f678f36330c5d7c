"""A helper module: skipped by discovery (leading underscore), imported by e2e_tools."""

GREETING = "hello"
