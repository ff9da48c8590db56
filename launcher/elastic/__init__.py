"""``blinkrun``'s side of an elastic job (``--min-np``/``--max-np``, host discovery).

``spec``       an elastic job's bounds (``ElasticSpec``) from the elastic flags
``launch``     what an elastic job changes in the launch
``driver``     where ranks are, free slots, spawns
``discovery``  host discovery (``--host-discovery-script``, blacklist)
"""
