"""Fixtures that tests of several directories share, found by pytest here instead of imported
by each module (an import a linter takes for unused)."""

from integration.controller_env import close_twins, env_fixture

__all__ = ["close_twins", "env_fixture"]
