"""Helpers that tests of several directories share: import them from here (``from
support.controller_env import ControllerEnv``), never from another directory's test modules.
Fixtures are not here: pytest finds them in the ``conftest.py`` of the directories that use
them (``tests/conftest.py`` for every directory), so no test module imports one by name."""
