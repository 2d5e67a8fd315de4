"""Public testing helpers for btlcore: :mod:`btlcore.testing.enginepair` drives engines by hand
on a virtual clock, without any device."""
