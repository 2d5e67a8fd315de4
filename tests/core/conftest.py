"""tests/core: the sans-I/O core on virtual time (helpers in btlcore.testing.enginepair)."""
