// dist::current_group(): one thread-local pointer, installed by a guard.
#include "lockstep/dist/current_group.h"

namespace lockstep::dist {

namespace {
thread_local ProcessGroup* current = nullptr;
}  // namespace

ProcessGroup* current_group() { return current; }

CurrentGroupGuard::CurrentGroupGuard(ProcessGroup* group) : prev_(current) { current = group; }

CurrentGroupGuard::~CurrentGroupGuard() { current = prev_; }

}  // namespace lockstep::dist
