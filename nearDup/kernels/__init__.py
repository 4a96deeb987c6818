"""Pure numpy kernels: no I/O, no click, no work-dir knowledge. Each docstring cites its formula."""
