"""The ``trib`` command line: thin click commands over :mod:`tributary_read`."""
