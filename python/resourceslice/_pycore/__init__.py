"""The pure-Python core: same functions and results as the Rust ``_core`` (docs/core.md)."""
