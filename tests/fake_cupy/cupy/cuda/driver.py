"""Fake ``cupy.cuda.driver``: the occupancy query the device executor's co-residency check asks."""


def occupancyMaxActiveBlocksPerMultiprocessor(func, block_size, dynamic_smem_bytes):
    from .._interpreter import FAKE_BLOCKS_PER_SM

    if block_size > 1024:
        return 0  # a block larger than a GPU's limit never runs
    return FAKE_BLOCKS_PER_SM
