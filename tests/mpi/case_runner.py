"""Runs a multi-process case script's ``case_<name>(rank, size)`` functions, in order, on every
rank, printing ``OK <name> rank <r>`` after each (the pytest side counts them)."""
import blinkflow as bf


def run_cases(cases: dict, only) -> None:
    """Every ``case_*`` function of ``cases`` (a module's globals), or those named in ``only``."""
    r, n = bf.rank(), bf.size()
    for name, fn in list(cases.items()):
        if name.startswith("case_") and (not only or name[5:] in only):
            fn(r, n)
            print(f"OK {name[5:]} rank {r}", flush=True)
