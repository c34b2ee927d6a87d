// Ranks named with their hosts (see rank_hosts.h).
#include "ranks/rank_hosts.h"

#include <cstddef>
#include <vector>

#include "lockstep/dist/mpi.h"

namespace lockstep::app {

std::string on_host(int rank) {
  const std::vector<std::string> hosts = dist::mpi_hosts();
  const auto r = static_cast<std::size_t>(rank);
  return rank >= 0 && r < hosts.size() ? " on " + hosts[r] : "";
}

std::string ranks_on_hosts() {
  const std::vector<std::string> hosts = dist::mpi_hosts();
  std::string s;
  for (std::size_t r = 0; r < hosts.size(); ++r)
    s += (r ? "," : " ranks=") + std::to_string(r) + "@" + hosts[r];
  return s;
}

}  // namespace lockstep::app
