"""The built-in output formats (CSV, JSON Lines, Parquet); the interface and the registry that
finds them by name are :mod:`export_lib.formats`."""
