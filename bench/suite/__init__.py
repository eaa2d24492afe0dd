"""The pytest front end: a plugin (plugin.py) over the engine's session, and the parametrized benchmark it drives."""
