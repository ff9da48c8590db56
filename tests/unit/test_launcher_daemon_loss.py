"""blinkrun reads from mpirun's own output which host's MPI daemon it lost (launcher/job/daemon_loss.py):
the ranks there can report nothing, so these help messages are the only place naming the host."""
from blinkflow.launcher.job.daemon_loss import DaemonLoss

NO_CALLBACK = b"""------------------------------------------------------------
A daemon failed to report back after being spawned. This could
be due to several factors, including inability to find the
daemon executable, or the executable was unable to find its
required supporting libraries. In some cases, the daemon was
able to execute, but was unable to complete a TCP connection
back to prterun:

  Local host:    bfa
  Remote host:   bfb
  Daemon exit status: 255
"""

NODE_DIED = """PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-bfa-77@0,0] on node bfa
  Remote daemon: [prterun-bfa-77@0,1] on node node-7

This is usually due to either a failure of the TCP network
"""


def test_the_host_is_read_from_either_message_in_pieces_of_any_size():
    seen = DaemonLoss()
    for i in range(0, len(NO_CALLBACK), 7):
        seen.feed_bytes(NO_CALLBACK[i:i + 7])
    for line in NODE_DIED.splitlines():
        seen.feed(line)
    assert seen.hosts == ["bfb", "node-7"]


def test_ranks_lines_and_unrelated_text_name_no_host():
    seen = DaemonLoss()
    seen.feed_bytes(b"[2]<stdout>: A daemon failed to report back\n[2]<stdout>:   Remote host:   evil\n"
                    b"Remote host: not-after-a-headline\n")
    assert seen.hosts == []
