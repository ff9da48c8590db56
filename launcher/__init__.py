"""``blinkrun``: the launcher (click). Installed as ``blinkflow.launcher``; this folder stays at the
repository's top level as the design card asks (setup.cfg maps it)."""
