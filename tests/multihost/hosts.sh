# Test hosts for the multihost tests (sourced by multihost_test.sh): N "hosts" as Linux network
# namespaces joined by veth links to a bridge in a "switch" namespace, each with its own host name
# (a UTS namespace entered by every process started there), its own working directory and an
# address that exists only on its link (10.231.7.I/24, interface lsh0). Ranks start through
# mpirun (run inside host1) with a hostfile and the launch agent agent.sh, which enters a host's
# namespaces (--mca plm_rsh_agent); OpenMPI is restricted to TCP on lsh0 (btl tcp,self).
#
#   mh_up N            make hosts host1..hostN (fails with the reason without root or ip);
#                      each host's net.ipv4.tcp_retries2 is MH_TCP_RETRIES2 (default 4: unacked
#                      TCP data is given up after ~6 s, not ~15 min)
#   mh_down            remove every namespace, link and file mh_up made (a trap calls it)
#   mh_mpirun HOSTS NP ARGS...   mpirun -np NP over the hosts named in HOSTS (host1,host2:2;
#                      ":K" = K slots, default 1), ARGS run in the host's working directory
#                      MH_OOB_KEEPALIVE="TIME INTVL PROBES" (default "10 1 5"): the keepalive
#                      of mpirun's links to its daemons, which tells mpirun that a host is gone
#                      (else it waits for the kernel's TCP timeouts, minutes, after a link died)
#                      MH_EXPORT="VAR ...": environment variables passed on to every rank
#   mh_link HOST up|down          the host's link, at the switch
#   mh_shape HOST TC-NETEM-ARGS   tc netem on the host's link (delay, loss, rate); fails naming
#                      the reason when the kernel has no netem
#   mh_has_netem       whether the kernel has netem (sch_netem)
#   mh_host_pids HOST  the pids of the processes in that host's namespace
#   mh_dir HOST        the host's working directory
#
# Nothing is routed anywhere: the namespaces have no other links and no default route.
set -u

MH_PREFIX="lsh-$$"
MH_SWITCH="$MH_PREFIX-sw"
MH_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MH_NET=10.231.7
MH_HOSTS=0
MH_ROOT=""

mh_fail() { echo "multihost: FAIL: $*" >&2; exit 1; }

mh_ns() { echo "$MH_PREFIX-$1"; }

mh_up() {
  local n=$1 i ns
  [ "$(id -u)" -eq 0 ] || mh_fail "the multihost tests need root (network namespaces); running as uid $(id -u)"
  command -v ip >/dev/null || mh_fail "no 'ip' command (iproute2) on PATH"
  command -v unshare >/dev/null || mh_fail "no 'unshare' command (util-linux) on PATH"
  # namespaces a killed run (ctest's timeout sends SIGKILL: no trap runs) left behind
  local stale pid p
  for stale in $(ip netns list | awk '$1 ~ /^lsh-[0-9]+-(sw|host[0-9]+)$/ {print $1}'); do
    pid=${stale#lsh-}; pid=${pid%%-*}
    [ -d "/proc/$pid" ] && continue
    for p in $(ip netns pids "$stale" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$stale" 2>/dev/null
    rm -rf "/etc/netns/$stale"
  done
  MH_ROOT=$(mktemp -d /tmp/lsh-multihost.XXXXXX)
  trap mh_down EXIT
  trap 'exit 130' INT TERM
  ip netns add "$MH_SWITCH" || mh_fail "ip netns add failed (no CAP_SYS_ADMIN?)"
  ip -n "$MH_SWITCH" link add br0 type bridge || mh_fail "cannot make a bridge"
  ip -n "$MH_SWITCH" link set br0 up
  # The switch only forwards frames: where br_netfilter is loaded, bridged frames would also go
  # through iptables (bridge-nf-call-*, per network namespace), CPU per packet that a real switch
  # does not take from the hosts' cores (here the same cores run the ranks).
  ip netns exec "$MH_SWITCH" sh -c 'for f in /proc/sys/net/bridge/bridge-nf-call-*; do
    [ -w "$f" ] && echo 0 >"$f"; done; true'
  for i in $(seq 1 "$n"); do
    ns=$(mh_ns host$i)
    ip netns add "$ns" || mh_fail "ip netns add $ns failed"
    MH_HOSTS=$i
    ip -n "$ns" link set lo up
    ip -n "$ns" link add lsh0 type veth peer name port$i netns "$MH_SWITCH" ||
      mh_fail "cannot make the veth link of host$i"
    ip -n "$ns" addr add "$MH_NET.$i/24" dev lsh0
    ip -n "$ns" link set lsh0 up
    # A host gives up on unacknowledged TCP data after ~6 s instead of ~15 min (the kernel's
    # default tcp_retries2=15): mpirun's abort message to a daemon behind a dead link would
    # otherwise keep it waiting. A cluster tunes the same sysctl (per network namespace here).
    ip netns exec "$ns" sh -c "echo ${MH_TCP_RETRIES2:-4} >/proc/sys/net/ipv4/tcp_retries2" ||
      mh_fail "cannot set net.ipv4.tcp_retries2 in $ns"
    ip -n "$MH_SWITCH" link set port$i master br0
    ip -n "$MH_SWITCH" link set port$i up
    mkdir -p "$MH_ROOT/host$i" "/etc/netns/$ns"
    # `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: the host names resolve there.
    { echo "127.0.0.1 localhost"; for j in $(seq 1 "$n"); do echo "$MH_NET.$j host$j"; done; } \
      >"/etc/netns/$ns/hosts"
  done
}

mh_down() {
  local i ns pid
  for i in $(seq 1 "$MH_HOSTS"); do
    ns=$(mh_ns host$i)
    # processes still in the namespace (a stopped rank) are continued and killed
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -CONT "$pid" 2>/dev/null
      kill -KILL "$pid" 2>/dev/null
    done
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  ip netns del "$MH_SWITCH" 2>/dev/null
  rmdir /etc/netns 2>/dev/null
  [ -n "$MH_ROOT" ] && rm -rf "$MH_ROOT"
  MH_HOSTS=0
}

mh_dir() { echo "$MH_ROOT/$1"; }

mh_host_pids() { ip netns pids "$(mh_ns "$1")"; }

mh_link() { ip -n "$MH_SWITCH" link set "port${1#host}" "$2"; }

mh_shape() {
  local host=$1; shift
  local out
  out=$(ip netns exec "$(mh_ns "$host")" tc qdisc replace dev lsh0 root netem "$@" 2>&1) ||
    mh_fail "tc netem on $host: $out (the kernel needs sch_netem)"
}

mh_has_netem() {
  ip netns exec "$(mh_ns host1)" tc qdisc add dev lsh0 root netem delay 0ms >/dev/null 2>&1 &&
    ip netns exec "$(mh_ns host1)" tc qdisc del dev lsh0 root >/dev/null 2>&1
}

mh_mpirun() {
  local hosts=$1 np=$2; shift 2
  local h ka_time ka_intvl ka_probes
  read -r ka_time ka_intvl ka_probes <<<"${MH_OOB_KEEPALIVE:-10 1 5}"
  : >"$MH_ROOT/hostfile"
  for h in ${hosts//,/ }; do
    echo "${h%%:*} slots=$([ "${h#*:}" != "$h" ] && echo "${h#*:}" || echo 1)" >>"$MH_ROOT/hostfile"
  done
  MH_PREFIX="$MH_PREFIX" ip netns exec "$(mh_ns host1)" unshare --uts \
    "$MH_HERE/agent.sh" --as host1 \
    "${MH_MPIRUN:-mpirun}" --allow-run-as-root --hostfile "$MH_ROOT/hostfile" -np "$np" \
      --mca plm_rsh_agent "$MH_HERE/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
      --mca oob_tcp_keepalive_time "$ka_time" --mca oob_tcp_keepalive_intvl "$ka_intvl" \
      --mca oob_tcp_keepalive_probes "$ka_probes" \
      --mca btl tcp,self --mca btl_tcp_if_include lsh0 --mca oob_tcp_if_include lsh0 \
      -x MH_ROOT="$MH_ROOT" $(for v in ${MH_EXPORT:-}; do echo "-x $v"; done) -x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      "$MH_HERE/agent.sh" --in-dir "$@"
}
