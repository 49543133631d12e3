"""Parsing SQL statements of both dialects: read-function calls, SELECTs and DML (via sqlglot)."""
