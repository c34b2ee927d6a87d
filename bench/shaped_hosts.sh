# shellcheck shell=bash
# The 2-host benchmarks' links and rank placement (bench/compare_overlap.sh,
# bench/compare_transport.sh): sourced after tests/multihost/hosts.sh, used after `mh_up 2`.

# shape_links RATE DELAY: shapes host1's and host2's egress, then prints what it did (one line).
# With sch_netem: netem rate RATE delay DELAY. Without it (this project's VMs): tbf for the rate
# and NO delay — a 64 KB bucket, a queue of 10 ms (no drops at these sizes), and TCP's GSO
# packets capped at 32 KB: tbf cuts a packet longer than its bucket into ~1.4 KB segments in
# software (a 64 KB GSO packet with its headers is), ~7x the packets through the veth/bridge path
# on the cores the ranks run on, which a NIC's segmentation offload would not cost.
# RATE=none: not shaped.
shape_links() {
  local rate=$1 delay=$2 h
  if [[ $rate == none ]]; then
    echo "not shaped (RATE=none: veth at memory speed)"
  elif mh_has_netem; then
    for h in host1 host2; do mh_shape "$h" rate "$rate" delay "$delay"; done
    echo "netem rate $rate delay $delay"
  else
    for h in host1 host2; do
      ip -n "$(mh_ns "$h")" link set dev lsh0 gso_max_size 32768 || mh_fail "gso_max_size on $h"
      ip netns exec "$(mh_ns "$h")" tc qdisc replace dev lsh0 root tbf rate "$rate" burst 64kb \
        latency 10ms || mh_fail "tc tbf on $h"
    done
    echo "tbf rate $rate burst 64kb latency 10ms, gso_max_size 32768; NO delay (this kernel has no sch_netem)"
  fi
}

# pin_ranks DIR VARS: the mpirun that mh_mpirun uses (DIR/mpirun: no binding, 300 s limit) and
# DIR/pin.sh, which runs a rank on one CPU (host1 -> CPU 0, host2 -> CPU 1: each namespace host
# would bind its rank to "its" core 0); exports MH_MPIRUN and MH_EXPORT=VARS (names given to
# the ranks).
pin_ranks() {
  printf '#!/bin/sh\nexec timeout 300 mpirun --bind-to none "$@"\n' >"$1/mpirun"
  # shellcheck disable=SC2016 # expanded by pin.sh, in the rank's host
  printf '#!/bin/sh\nh=$(hostname); exec taskset -c $((${h#host} - 1)) "$@"\n' >"$1/pin.sh"
  chmod +x "$1/mpirun" "$1/pin.sh"
  export MH_MPIRUN="$1/mpirun" MH_EXPORT="$2"
}
