"""Export configuration: company files, their models and validation messages, destinations,
query specs and manual-export requests. ``loader.load_catalog`` is the entry point."""
