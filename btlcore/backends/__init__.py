"""btlcore's own backends; each sub-package is a plugin found through the
``btlcore.backends`` entry-point group (see ``btlcore.registry``)."""
