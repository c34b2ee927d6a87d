#!/usr/bin/env bash
# The multihost tests (ctest label multihost): `lockstep train` on ranks spread over 2 or 3 test
# hosts (network namespaces joined by veth links, hosts.sh), OpenMPI over TCP only.
#
#   multihost_test.sh SCENARIO LOCKSTEP
#
# SCENARIO: deterministic | checkpoint | link_down | stopped_host | killed_rank | bad_data | loss |
#           data_path
# Exits 0 (pass) or 1 (fail, with the reason).
set -u
scenario=$1
LOCKSTEP=$(realpath "$2")
source "$(dirname "$0")/hosts.sh"

fails=0
check() {  # check DESCRIPTION COMMAND... : runs COMMAND, counts a failure when it fails
  local what=$1; shift
  if "$@"; then echo "multihost: ok: $what"; else echo "multihost: FAIL: $what"; fails=$((fails + 1)); fi
}
same_bytes() { cmp -s "$1" "$2"; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

# One process, one device, no MPI: the reference every layout must match bit for bit.
single() { (cd "$MH_ROOT" && "$LOCKSTEP" "$@" --devices cpu:0 --backend threads --quiet >/dev/null); }

# Deterministic mode across hosts: 2 hosts, 3 hosts, 2 hosts x 2 ranks, 2 hosts x 2 devices;
# rank 0 alone writes --save (into host1's directory); eval counts each sample once.
scenario_deterministic() {
  mh_up 3
  local train=(train --deterministic --optimizer adam --activation tanh --model mlp:10,16,8,2
               --batch-size 23 --epochs 2 --quiet)
  check "one process trains" single "${train[@]}" --save "$MH_ROOT/one.safetensors"
  local layout hosts np devices out
  for layout in "host1,host2 2 cpu:0" "host1,host2,host3 3 cpu:0" "host1:2,host2:2 4 cpu:0" \
                "host1,host2 2 cpu:0,cpu:1"; do
    read -r hosts np devices <<<"$layout"
    rm -f "$(mh_dir host1)/final.safetensors"
    out=$(mh_mpirun "$hosts" "$np" "$LOCKSTEP" "${train[@]}" --devices "$devices" \
          --save final.safetensors 2>&1)
    check "$hosts ($np ranks, $devices) exits 0" test $? -eq 0 || echo "$out"
    check "$hosts ($np ranks, $devices): bit-identical to one process" \
      same_bytes "$(mh_dir host1)/final.safetensors" "$MH_ROOT/one.safetensors"
    check "$hosts: world_size=$np in the summary" grep -q "world_size=$np ranks=0@host1,1@host" <<<"$out"
    check "$hosts: only rank 0 wrote --save" \
      test ! -e "$(mh_dir host2)/final.safetensors" -a ! -e "$(mh_dir host3)/final.safetensors"
  done
  # the 2-host dropout trajectory: the masks follow the global batch row
  local drop=(train --deterministic --dropout 0.3 --epochs 2 --batch-size 23 --quiet)
  check "one process trains with dropout" single "${drop[@]}" --save "$MH_ROOT/drop1"
  out=$(mh_mpirun host1,host2,host3 3 "$LOCKSTEP" "${drop[@]}" --save drop3 2>&1)
  check "dropout on 3 hosts: bit-identical to one process" same_bytes "$(mh_dir host1)/drop3" "$MH_ROOT/drop1"
  # eval: 10 rows over 3 hosts, each evaluated once
  local csv="$MH_ROOT/ten.csv" i
  for i in $(seq 0 9); do echo "$i.5,$((10 - i)).25,$((i % 2))" >>"$csv"; done
  (cd "$MH_ROOT" && "$LOCKSTEP" train --data "csv:$csv" --val-fraction 0 --epochs 1 --save w --quiet >/dev/null)
  local one three
  one=$("$LOCKSTEP" eval --data "csv:$csv" --val-fraction 0 --weights "$MH_ROOT/w")
  three=$(mh_mpirun host1,host2,host3 3 "$LOCKSTEP" eval --data "csv:$csv" --val-fraction 0 \
          --weights "$MH_ROOT/w" 2>"$MH_ROOT/eval.err")
  echo "multihost: eval, one process: $one; 3 hosts: $three"
  check "eval on 3 hosts: rank 0 prints one line, samples 10" \
    grep -Eqx "loss \S+ accuracy \S+ samples 10" <<<"$three"
  check "eval on 3 hosts: one line" test "$(wc -l <<<"$three")" -eq 1
  check "eval on 3 hosts: the accuracy of one process" \
    test "$(awk '{print $4}' <<<"$three")" = "$(awk '{print $4}' <<<"$one")"
}

# Checkpoints without a shared file system: each host has its own directory; rank 0 writes
# (host1's ckpt/), and on --resume rank 0 reads and broadcasts. 2 hosts -> 3 hosts -> 1 host,
# bit-identical to one uninterrupted process.
scenario_checkpoint() {
  mh_up 3
  local train=(train --deterministic --batch-size 32 --checkpoint-dir ckpt --quiet)
  local out
  out=$(mh_mpirun host1,host2 2 "$LOCKSTEP" "${train[@]}" --epochs 2 2>&1)
  check "2 hosts write checkpoints" test $? -eq 0 || echo "$out"
  check "rank 0 wrote one file per epoch into host1's directory, nothing else" \
    test "$(ls "$(mh_dir host1)/ckpt" | tr '\n' ' ')" = "epoch-0001.safetensors epoch-0002.safetensors "
  check "host2 holds no checkpoint" test ! -e "$(mh_dir host2)/ckpt/epoch-0001.safetensors"
  out=$(mh_mpirun host1,host2,host3 3 "$LOCKSTEP" "${train[@]}" --epochs 3 --resume --save three 2>&1)
  check "3 hosts resume from host1's checkpoint (2 -> 3 ranks)" test $? -eq 0 || echo "$out"
  check "single process, 3 epochs" single train --deterministic --batch-size 32 --epochs 3 \
    --save "$MH_ROOT/three"
  check "2 -> 3 ranks: bit-identical to one process" same_bytes "$(mh_dir host1)/three" "$MH_ROOT/three"
  check "single process, 4 epochs" single train --deterministic --batch-size 32 --epochs 4 \
    --save "$MH_ROOT/four"
  # 3 -> 1: host1 alone continues to epoch 4
  out=$(mh_mpirun host1 1 "$LOCKSTEP" "${train[@]}" --epochs 4 --resume --save four 2>&1)
  check "1 host resumes the 3-host checkpoint (3 -> 1 rank)" test $? -eq 0 || echo "$out"
  check "2 -> 3 -> 1 ranks: bit-identical to one process" same_bytes "$(mh_dir host1)/four" "$MH_ROOT/four"
  # and 3 -> 3 hosts from epoch 3, saving at the end
  out=$(mh_mpirun host1,host2,host3 3 "$LOCKSTEP" "${train[@]}" --epochs 4 --resume --save again 2>&1)
  check "3 hosts resume epoch 4's checkpoint with nothing left to train" test $? -eq 0 || echo "$out"
  # no checkpoint on host1: every rank fails with rank 0's reason, exit 2
  rm -f "$(mh_dir host1)"/ckpt/*
  mkdir -p "$(mh_dir host2)/ckpt"
  out=$(mh_mpirun host1,host2 2 "$LOCKSTEP" "${train[@]}" --epochs 5 --resume 2>&1)
  local status=$?
  check "resume without a checkpoint on rank 0's host: exit 2" test $status -eq 2 || echo "$out"
  check "rank 1 reports rank 0's reason" grep -q "rank 1.*--resume: no checkpoint in ckpt (on rank 0)" <<<"$out"
}

# A fault while 3 hosts train (fault injected once rank 0 wrote the first checkpoint): every
# surviving rank ends with exit 4 within --timeout plus a bounded teardown, naming the failed
# rank, its host and the step; the checkpoint is intact and the remaining hosts resume from it.
TIMEOUT=3
TEARDOWN=20
fault_run() {  # fault_run HOSTS NP INJECT-COMMAND
  local hosts=$1 np=$2 inject=$3
  local ck="$(mh_dir host1)/ckpt/epoch-0001.safetensors"
  # mpirun learns that a host is gone from its daemon link's keepalive (after TIMEOUT + 2 s at
  # the least): the ranks' own timeout comes first and decides the exit status.
  MH_OOB_KEEPALIVE="$TIMEOUT 1 $((TIMEOUT + 2))" \
  mh_mpirun "$hosts" "$np" "$LOCKSTEP" train --deterministic --batch-size 8 --epochs 400 \
    --checkpoint-dir ckpt --timeout "$TIMEOUT" --quiet >"$MH_ROOT/out" 2>&1 &
  local job=$! t=0
  until [ -e "$ck" ] || [ $t -ge 300 ]; do sleep 0.1; t=$((t + 1)); done
  check "the first checkpoint appeared" test -e "$ck"
  cp "$ck" "$MH_ROOT/first.safetensors"
  local start; start=$(now)
  eval "$inject"
  # bounded: the job must end within TIMEOUT + TEARDOWN; afterwards it is killed
  t=0
  while kill -0 $job 2>/dev/null && [ $t -lt $(((TIMEOUT + TEARDOWN + 20) * 10)) ]; do
    sleep 0.1; t=$((t + 1))
  done
  if kill -0 $job 2>/dev/null; then
    check "mpirun ended" false
    kill -KILL $job 2>/dev/null
  fi
  wait $job
  STATUS=$?
  ELAPSED=$(since "$start")
  cat "$MH_ROOT/out"
  echo "multihost: mpirun exited with status $STATUS ${ELAPSED} s after the fault (--timeout $TIMEOUT)"
  check "the job ended within --timeout $TIMEOUT + $TEARDOWN s" test "$(echo "$ELAPSED < $TIMEOUT + $TEARDOWN" | bc)" -eq 1
  check "the first checkpoint is intact" same_bytes "$ck" "$MH_ROOT/first.safetensors"
}

resume_on() {  # resume_on HOSTS NP: the remaining hosts continue from host1's newest checkpoint
  local out
  out=$(mh_mpirun "$1" "$2" "$LOCKSTEP" train --deterministic --batch-size 8 --epochs 6 \
        --checkpoint-dir ckpt --resume --timeout 30 --quiet --save resumed 2>&1)
  check "the remaining hosts ($1) resume from the last checkpoint" test $? -eq 0 || echo "$out"
  single train --deterministic --batch-size 8 --epochs 6 --save "$MH_ROOT/straight"
  check "the resumed run ends bit-identical to one uninterrupted process" \
    same_bytes "$(mh_dir host1)/resumed" "$MH_ROOT/straight"
}

survivors_report() {  # survivors_report FAILED-RANK FAILED-HOST
  check "exit status 4" test "$STATUS" -eq 4
  check "rank 0 (on host1) names rank $1, its host $2 and the step" \
    grep -Eq "rank 0 on host1: .*rank $1 on $2 .*step [0-9]+ " "$MH_ROOT/out"
}

scenario_link_down() {
  mh_up 3
  fault_run host1,host2,host3 3 "mh_link host3 down"
  survivors_report 2 host3
  resume_on host1,host2 2
}

scenario_stopped_host() {
  mh_up 3
  fault_run host1,host2,host3 3 'for p in $(mh_host_pids host2); do grep -q lockstep /proc/$p/cmdline 2>/dev/null && kill -STOP $p; done'
  survivors_report 1 host2
  resume_on host1,host3 2
}

# A rank that fails alone (bad data on host2) tells the others, which name it and its host;
# a NaN loss on host2 stops every rank, each naming rank 1 and its host.
scenario_bad_data() {
  mh_up 3
  local out status
  out=$(LOCKSTEP_TEST_FAULT=data:1:3 MH_EXPORT=LOCKSTEP_TEST_FAULT \
        mh_mpirun host1,host2,host3 3 "$LOCKSTEP" train --epochs 2 --timeout 30 --quiet 2>&1)
  status=$?
  check "exit status 2 (bad input)" test $status -eq 2 || echo "$out"
  check "rank 1 names its host" grep -q "rank 1 on host2: injected fault" <<<"$out"
  check "rank 0 names rank 1, its host and the step" \
    grep -Eq "rank 0 on host1: .*rank 1 on host2 failed: .*step 3 " <<<"$out"
  # a NaN loss on rank 1: every rank stops at the same step (exit 3), naming rank 1 and its host
  out=$(LOCKSTEP_TEST_FAULT=nan:1:3 MH_EXPORT=LOCKSTEP_TEST_FAULT \
        mh_mpirun host1,host2,host3 3 "$LOCKSTEP" train --epochs 2 --timeout 30 --quiet 2>&1)
  status=$?
  check "NaN on rank 1: exit status 3" test $status -eq 3 || echo "$out"
  check "NaN on rank 1: rank 2 names rank 1 and its host" \
    grep -Eq "rank 2 on host3: training loss is NaN at epoch 1 step 3 .* on rank 1 on host2;" <<<"$out"
}

# The sockets data path told to use an interface the hosts do not reach each other on (loopback):
# both ranks exit 4 naming the rank that could not connect and the fix, and the rank waiting to
# accept it learns it at once, not after the connect timeout (--timeout 30 here).
scenario_data_path() {
  mh_up 2
  local out status start took
  start=$(now)
  out=$(LOCKSTEP_SOCKET_IFNAME=lo MH_EXPORT=LOCKSTEP_SOCKET_IFNAME \
        mh_mpirun host1,host2 2 "$LOCKSTEP" train --epochs 1 --timeout 30 --quiet 2>&1)
  status=$?
  took=$(since "$start")
  check "exit status 4" test $status -eq 4 || echo "$out"
  check "both ranks name rank 0's failed connection and the fix" test "$(grep -c \
    "error: .*rank 0 on host1 cannot open a TCP connection to rank 1 on host2: tried 127.0.0.1:.*Set LOCKSTEP_SOCKET_IFNAME" \
    <<<"$out")" -eq 2
  check "ended after $took s, well before the 30 s connect timeout" test "$(echo "$took < 15" | bc)" -eq 1
}

scenario_killed_rank() {
  mh_up 3
  fault_run host1,host2,host3 3 'for p in $(mh_host_pids host3); do grep -q lockstep /proc/$p/cmdline 2>/dev/null && kill -KILL $p; done'
  check "mpirun reports a failure" test "$STATUS" -ne 0
  resume_on host1,host2 2
}

# Packet loss on host2's link: the same weights as without loss; the slowdown is printed. With
# netem, 1 % random loss; a kernel without sch_netem (the development machine's) gets loss by tail
# drop instead: a token bucket (tbf) whose bucket and queue (128 kB each) are smaller than one
# all-reduce of the 2 x 256 hidden-unit MLP (~280 kB), so bursts lose packets (~1.5 % measured).
scenario_loss() {
  mh_up 2
  local train=(train --deterministic --model mlp:10,256,256,2 --batch-size 32 --epochs 1 --quiet)
  local start clean lossy how
  start=$(now)
  mh_mpirun host1,host2 2 "$LOCKSTEP" "${train[@]}" --save clean >/dev/null 2>&1
  check "no loss: exit 0" test $? -eq 0
  clean=$(since "$start")
  if mh_has_netem; then
    mh_shape host2 loss 1%
    how="netem loss 1%"
  else
    how="tbf rate 400mbit burst 128kb limit 128kb (no netem in this kernel: tail drop)"
    ip netns exec "$(mh_ns host2)" tc qdisc replace dev lsh0 root tbf rate 400mbit burst 128kb \
      limit 128kb || mh_fail "tc tbf on host2"
  fi
  start=$(now)
  mh_mpirun host1,host2 2 "$LOCKSTEP" "${train[@]}" --save lossy --timeout 60 >/dev/null 2>&1
  check "lossy link: exit 0" test $? -eq 0
  lossy=$(since "$start")
  local stats sent dropped
  stats=$(ip netns exec "$(mh_ns host2)" tc -s qdisc show dev lsh0)
  sent=$(sed -n 's/.*Sent [0-9]* bytes \([0-9]*\) pkt.*/\1/p' <<<"$stats" | head -1)
  dropped=$(sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' <<<"$stats" | head -1)
  check "host2's link lost packets ($dropped of $((sent + dropped)))" test "${dropped:-0}" -gt 0
  check "the lossy link trains to the same weights" same_bytes "$(mh_dir host1)/clean" "$(mh_dir host1)/lossy"
  echo "multihost: $how on host2's egress: $dropped of $((sent + dropped)) packets dropped" \
       "($(echo "scale=2; 100 * $dropped / ($sent + $dropped)" | bc) %); 1 epoch: ${clean} s clean," \
       "${lossy} s lossy"
}

declare -F "scenario_$scenario" >/dev/null || mh_fail "unknown scenario '$scenario'"
"scenario_$scenario"
[ "$fails" -eq 0 ] && echo "multihost: PASS ($scenario)" || echo "multihost: $fails check(s) failed ($scenario)"
[ "$fails" -eq 0 ]
