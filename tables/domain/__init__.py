"""Pure domain code: standard library only, no I/O, time passed in as `now`."""
