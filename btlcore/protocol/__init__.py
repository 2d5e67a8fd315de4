"""btlcore's protocol core, sans-I/O (see the modules; a map follows in a later step)."""
