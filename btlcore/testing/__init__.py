"""Public testing tools for btlcore: the backend conformance suite (``conformance``), the
two-engine harness that drives engines by hand on a virtual clock (``enginepair``), and
helpers that a backend's or a user's own tests import instead of copying ours."""
