"""Gang scheduling: one module per backend, the registry that picks one per job, and the builtin backend's
admission (see docs/gang.md).

* `base`: what a backend is (interface and capabilities); `backends`: the registry, :func:`backends.backend_for`.
* `builtin`, `volcano`, `scheduler_plugins`, `kueue`, `none`: the backends.
* The builtin backend's admission, pure: `queue` (one pass) over `placement` (the policy), `request` (a gang),
  `cluster` (free capacity), `caches` (what a pass keeps) and `explain` (why a gang waits).
* Its loop, with I/O: `admission`, and `host` (what it needs from the operator).
"""
