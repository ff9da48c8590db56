"""Which of blinkrun's environment variables reach the ranks on every host.

Like horovodrun, blinkrun forwards its whole environment (Open MPI's ``-x NAME`` for each) so a
script sees on another host what it sees here, except the names in :data:`LEFT_OUT`: those that
describe this host, this shell or this launch and would be wrong on another host or in a rank.
"""
from __future__ import annotations

import re
from typing import List, Mapping

#: Patterns (whole-name regular expressions) of variables that are not forwarded, and why.
LEFT_OUT = {
    r"BASH_FUNC_.*": "exported shell functions (their names are not variable names)",
    r"OLDPWD": "the launching shell's previous directory",
    r".*CUDA_VISIBLE_DEVICES": "each host's GPUs are its own; blinkrun names them on every host",
    r"HOROVOD_SECRET_KEY": "horovodrun's per-job secret",
    r"HOSTNAME": "the launching host's name",
    r"SSH_(AUTH_SOCK|CLIENT|CONNECTION|TTY|ORIGINAL_COMMAND)": "the launching shell's ssh session",
    r"(OMPI|PRTE)_(?!MCA_).*|PMIX_.*|PMI_.*": "the MPI launcher's own per-process variables "
                                              "(MCA settings, OMPI_MCA_*/PRTE_MCA_*, are forwarded)",
    r"BLINKRUN_.*": "blinkrun's wrapper's per-rank variables",
}
_LEFT_OUT = re.compile("|".join(f"(?:{p})" for p in LEFT_OUT))
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_forwarded(name: str) -> bool:
    return bool(_NAME.fullmatch(name)) and not _LEFT_OUT.fullmatch(name)


def forwarded_variables(environ: Mapping[str, str]) -> List[str]:
    """The names in ``environ`` every rank gets, sorted."""
    return sorted(name for name in environ if is_forwarded(name))
