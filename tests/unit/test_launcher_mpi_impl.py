"""Recognising the MPI implementation from `mpirun --version` text."""
import pytest

from blinkflow.launcher.job.mpi_impl import MPICH, OPEN_MPI, MpiNotFoundError, parse_version_text

OPENMPI5 = "mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
OPENMPI4 = "mpirun (Open MPI) 4.1.2\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
MPICH4 = """HYDRA build details:
    Version:                                 4.2.0
    Release Date:                            Fri Feb  9 12:29:21 CST 2024
    CC:                              gcc
    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist
"""
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.11 Build 20231005 (id: 74c4a23)\nCopyright 2003-2023, Intel Corporation.\n"


@pytest.mark.parametrize("text, family, name, version", [
    (OPENMPI5, OPEN_MPI, "Open MPI", "5.0.11"), (OPENMPI4, OPEN_MPI, "Open MPI", "4.1.2"),
    (MPICH4, MPICH, "MPICH", "4.2.0"), (INTEL, MPICH, "Intel MPI", "2021.11"),
])
def test_parse(text, family, name, version):
    impl = parse_version_text(text, "/x/mpirun")
    assert (impl.family, impl.name, impl.version, impl.mpirun) == (family, name, version, "/x/mpirun")


def test_unknown_mpi_is_a_typed_error():
    with pytest.raises(MpiNotFoundError, match="not Open MPI or MPICH"):
        parse_version_text("srun: slurm 23.02\n", "/usr/bin/srun")
