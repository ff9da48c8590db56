#!/bin/sh
# A second "host" on this machine for blinkrun's multi-host tests: a network namespace joined to
# this one by a veth pair, with its own host name and an sshd that only this key opens.
#   sh tests/multihost/netns_sshd.sh up     # root; needs iproute2, unshare, openssh-server
#   eval "$(sh tests/multihost/netns_sshd.sh env)"
#   python -m pytest tests/mpi/test_blinkrun_multihost.py
#   sh tests/multihost/netns_sshd.sh down
set -eu
NS=bfhostb
DIR=/tmp/blinkrun-netns
HERE=10.211.0.1
THERE=10.211.0.2
NET=10.211.0.0/24
SSH_ARGS="-i $DIR/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

case "${1:-}" in
up)
    mkdir -p "$DIR" /run/sshd
    ip netns add "$NS"
    ip link add veth-bfa type veth peer name veth-bfb
    ip link set veth-bfb netns "$NS"
    ip addr add "$HERE/24" dev veth-bfa
    ip link set veth-bfa up
    ip netns exec "$NS" ip addr add "$THERE/24" dev veth-bfb
    ip netns exec "$NS" ip link set veth-bfb up
    ip netns exec "$NS" ip link set lo up
    ssh-keygen -q -t ed25519 -N "" -f "$DIR/host_key"
    ssh-keygen -q -t ed25519 -N "" -f "$DIR/id_ed25519"
    cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"
    printf '#!/bin/sh\nexec ssh %s "$@"\n' "$SSH_ARGS" > "$DIR/ssh"   # Hydra takes a program, not options
    chmod +x "$DIR/ssh"
    cat > "$DIR/sshd_config" <<CONF
ListenAddress $THERE
HostKey $DIR/host_key
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin yes
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile $DIR/sshd.pid
CONF
    ip netns exec "$NS" unshare --uts sh -c "hostname $NS; exec /usr/sbin/sshd -f $DIR/sshd_config"
    ;;
env)
    echo "export BLINKRUN_TEST_HOSTS=$HERE:2,$THERE:2"
    echo "export BLINKRUN_TEST_MPI_ARGS_OPENMPI=\"--prtemca plm_ssh_args '$SSH_ARGS' --prtemca oob_tcp_if_include $NET --mca btl_tcp_if_include $NET\""
    echo "export BLINKRUN_TEST_MPI_ARGS_MPICH=\"-launcher ssh -launcher-exec $DIR/ssh -iface veth-bfa\""
    ;;
down)
    [ -f "$DIR/sshd.pid" ] && kill "$(cat "$DIR/sshd.pid")" || true
    ip link del veth-bfa 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$DIR"
    ;;
*)
    echo "usage: $0 up|env|down" >&2
    exit 2
    ;;
esac
