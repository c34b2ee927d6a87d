// OpenBLAS kernel choice (see include/lockstep/core/blas.h).
#include "lockstep/core/blas.h"

#include <cblas.h>
#include <elf.h>
#include <link.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace lockstep {

std::string openblas_core() {
  const char* name = openblas_get_corename();
  return name ? std::string(name) : std::string();
}

std::string openblas_coretype_for_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "SandyBridge";
#endif
  return "";
}

namespace {

// True when this dynamically linked program was started by running the dynamic loader itself
// (`/lib64/ld-linux-x86-64.so.2 PROGRAM ARGS`): /proc/self/exe is then the loader, not PROGRAM.
// The kernel leaves AT_BASE (the interpreter's address) 0 when it started no interpreter, and
// the loader points AT_PHDR at the program's headers, which name an interpreter (PT_INTERP).
bool started_through_the_loader() {
  if (getauxval(AT_BASE) != 0) return false;
  const auto* phdr = reinterpret_cast<const ElfW(Phdr)*>(getauxval(AT_PHDR));
  const unsigned long count = getauxval(AT_PHNUM);
  for (unsigned long k = 0; phdr != nullptr && k < count; ++k)
    if (phdr[k].p_type == PT_INTERP) return true;
  return false;
}

// The path to exec this program by. The kernel names the new process (/proc/PID/comm, what ps,
// top, pgrep and killall show) after the last component of the path given to execve, so
// "/proc/self/exe" would call it "exe": the file's own path instead, when it is still this file
// (same device and inode; not after the program was deleted or replaced since it started).
std::string exe_path() {
  char buf[4096];
  const ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  struct stat self {}, named {};
  if (len > 0) {
    buf[len] = '\0';
    if (stat("/proc/self/exe", &self) == 0 && stat(buf, &named) == 0 &&
        self.st_dev == named.st_dev && self.st_ino == named.st_ino)
      return buf;
  }
  return "/proc/self/exe";
}

}  // namespace

std::string openblas_coretype_to_set(bool coretype_set, const std::string& core,
                                     const std::string& for_cpu) {
  if (coretype_set || for_cpu.empty() || strcasecmp(core.c_str(), "Prescott") != 0) return "";
  return for_cpu;
}

void reexec_with_openblas_kernels(char** argv) {
  const std::string type = openblas_coretype_to_set(std::getenv("OPENBLAS_CORETYPE") != nullptr,
                                                    openblas_core(), openblas_coretype_for_cpu());
  if (type.empty() || argv == nullptr || argv[0] == nullptr) return;
  // Under valgrind the new start would run natively, outside the tool (no --trace-children):
  // a profile must measure this process, Prescott kernels and all.
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr) return;
  // Started as `ld.so PROGRAM`: exec'ing /proc/self/exe would run the loader on our arguments.
  if (started_through_the_loader()) return;
  if (setenv("OPENBLAS_CORETYPE", type.c_str(), 1) != 0) return;
  execv(exe_path().c_str(), argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: leave the environment as it was
}

}  // namespace lockstep
