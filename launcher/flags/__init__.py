"""``blinkrun``'s flags: ONE table, and what is derived from it.

``table``                the one table of ``blinkrun``'s flags: spellings (``horovodrun``'s too),
                         handling, what each feeds, help lines; the other flag lists are views of it
``docs``                 the documented flag tables (docs/launching.md, docs/configuration.md),
                         written from the flag table
``settings``             the ranks' ``BLINKFLOW_*`` variables from the setting flags
``horovod_config_file``  ``--config-file F``: Horovod's YAML parameter file, read as flags
"""
