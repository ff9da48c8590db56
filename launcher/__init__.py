"""``blinkrun``: the launcher (click). Installed as ``blinkflow.launcher``; this folder stays at the
repository's top level as the design card asks (setup.cfg maps it).

Modules and subpackages, one job each:

``cli``       entry point of the ``blinkrun`` console script
``one_line``  a click command whose every usage error is one line and exit status 2
``commands``  subpackage: ``blinkrun``'s commands (run a job; topo, plan, simulate, check-build)
``flags``     subpackage: the one flag table, the documented tables and what the flags set
``job``       subpackage: a job under ``mpirun``: hosts, arguments, environment, supervision
``ranks``     subpackage: the wrapper on every rank and what it reports
``elastic``   subpackage: ``blinkrun``'s side of an elastic job
"""
