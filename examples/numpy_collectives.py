"""blinkflow's collectives on numpy arrays, without TensorFlow (the README's first example).

    blinkrun -np 2 python examples/numpy_collectives.py     # any number of ranks from 2

At one rank the "evens" set below has the global set's ranks, which ``add_process_set`` refuses
(``ProcessSetError``), as Horovod's does.
"""
import numpy as np
import blinkflow as bf

bf.init()                                     # discovers hosts and devices, plans, starts the runtime
x = np.full(4, bf.rank(), np.float32)
mean = bf.allreduce(x)                        # Average (default), Sum, Min, Max, Product
rows = bf.allgather(x[:bf.rank() + 1])        # first dimension may differ per rank
root = bf.broadcast(x, root_rank=0)
part = bf.reducescatter(np.ones((5, 2)), op=bf.Sum)  # the first 5 % size ranks get one extra row
got, splits = bf.alltoall(np.arange(2 * bf.size()), splits=[2] * bf.size())  # (output, received_splits)
h = bf.allreduce_async(x, name="grad.0"); bf.synchronize(h)
evens = bf.add_process_set(range(0, bf.size(), 2))    # collective over every rank
if evens.included():
    bf.allreduce(x, process_set=evens)        # its own negotiation, plan and thread
bf.remove_process_set(evens)
print(bf.rank(), mean, rows, root, part.shape, got)
bf.shutdown()
