#!/usr/bin/env bash
# Launch agent of the multihost tests (hosts.sh):
#   agent.sh HOST COMMAND...   mpirun's rsh agent: runs COMMAND (a shell command line, as ssh
#                              would) in HOST's network and UTS namespaces, as host HOST
#   agent.sh --as HOST CMD...  (inside a fresh UTS namespace) sets the host name, runs CMD
#   agent.sh --in-dir CMD...   runs CMD in $MH_ROOT/<host name> (the host's working directory)
# MH_PREFIX names the namespaces (lsh-PID); only the test's own namespaces are entered.
set -u
case "${1:-}" in
  --as)
    hostname "$2" || exit 1
    shift 2
    exec "$@" ;;
  --in-dir)
    shift
    cd "$MH_ROOT/$(hostname)" || exit 1
    exec "$@" ;;
esac
host=$1
shift
case "$host" in host[0-9]*) ;; *) echo "agent.sh: unknown host '$host'" >&2; exit 1 ;; esac
exec ip netns exec "$MH_PREFIX-$host" unshare --uts "$0" --as "$host" /bin/sh -c "$*"
