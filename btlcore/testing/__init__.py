"""Public testing tools for btlcore: the backend conformance suite (``conformance``) and
helpers that a backend's or a user's own tests import instead of copying ours."""
