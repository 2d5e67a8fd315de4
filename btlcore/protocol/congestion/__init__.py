"""Congestion control, behind a small interface (filled in below)."""
