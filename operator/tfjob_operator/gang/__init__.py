"""Gang scheduling: the pure admission core (`placement`) and one backend module per scheduler.

Pick a backend with :func:`tfjob_operator.gang.base.backend_for`; see docs/gang.md.
"""
