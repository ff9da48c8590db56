"""What ``blinkrun`` runs on every rank, and what a rank tells it.

``rank_exec``  the wrapper ``blinkrun`` starts on every rank
``events``     the one-line messages a rank's wrapper sends ``blinkrun``
``gpu_pin``    pinning a rank to its GPU before CUDA starts in it
``pyhook``     subpackage: the ``sitecustomize`` put first on a Python rank's path
"""
