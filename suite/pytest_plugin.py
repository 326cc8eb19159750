"""pytest plugin (entry point ``pytest11: mpcbench``): matrix options for ``pytest suite``.

Filled in by the runner (issue 5).
"""
