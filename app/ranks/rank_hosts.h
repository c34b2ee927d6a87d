// Ranks named with their hosts in a job whose ranks run on several hosts (issue 21): the
// error prefix, the summary line's rank list, the ranks of a non-finite loss. On one host (or
// one process) ranks are named alone, as before.
#pragma once

#include <string>

namespace lockstep::app {

/// " on HOST" for `rank` of a job on several hosts (dist::mpi_hosts()), else "".
std::string on_host(int rank);

/// " ranks=0@host1,1@host2,2@host3" (every rank with its host, for the summary line) in a job
/// on several hosts, else "".
std::string ranks_on_hosts();

}  // namespace lockstep::app
