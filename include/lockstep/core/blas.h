// Which OpenBLAS kernels run Lockstep's CPU GEMMs, and a remedy for a CPU that OpenBLAS does not
// recognise.
//
// Debian 12's OpenBLAS (0.3.21, built with DYNAMIC_ARCH) picks its kernels once, when the library
// is loaded, from the CPU model, and maps models it does not know to its generic "Prescott"
// (SSE3) kernels. On a 5th-generation Xeon (family 6, model 207) that makes the MLP benchmark's
// GEMMs about 6x slower than the AVX-512 "Cooperlake" kernels the same library carries
// (bench/RESULTS.md, 2026-11-30). Newer OpenBLAS releases fall back by CPU features instead, and
// the library honours the environment variable OPENBLAS_CORETYPE, read only at load time (before
// main()). So a program can only fix the choice by setting the variable and starting again.
#pragma once

#include <string>

namespace lockstep {

/// OpenBLAS's name for the kernels it uses in this process (openblas_get_corename(), e.g.
/// "Cooperlake", "Haswell", "Zen", "Prescott").
std::string openblas_core();

/// The OPENBLAS_CORETYPE that OpenBLAS's own feature fallback chooses for this CPU (driver/
/// others/dynamic.c, gotoblas_dynamic_init: AVX512-BF16 -> "Cooperlake", AVX-512 F -> "SkylakeX",
/// AVX2 -> "Haswell", AVX -> "SandyBridge"; the instruction sets as the CPU and the OS support
/// them, per GCC's __builtin_cpu_supports), or "" when the CPU has none of them (Prescott is
/// then right). OpenBLAS 0.3.21's name table lacks "Cooperlake": that name reaches the same
/// kernels through the same feature fallback (OPENBLAS_VERBOSE >= 1 prints "Core not found").
std::string openblas_coretype_for_cpu();

/// Pure form of the decision made by reexec_with_openblas_kernels(): the OPENBLAS_CORETYPE value
/// to start again with, or "" to go on as is. Only when the user set no OPENBLAS_CORETYPE
/// (`coretype_set` false), OpenBLAS chose its generic "Prescott" kernels (`core`, compared
/// case-insensitively) and the CPU supports better ones (`for_cpu` non-empty).
std::string openblas_coretype_to_set(bool coretype_set, const std::string& core,
                                     const std::string& for_cpu);

/// For a program's main(), before anything else runs (no threads, no MPI_Init): when
/// openblas_coretype_to_set(getenv("OPENBLAS_CORETYPE") != nullptr, openblas_core(),
/// openblas_coretype_for_cpu()) names a core type, sets OPENBLAS_CORETYPE to it and replaces the
/// process by a new start of the same executable (/proc/self/exe's file, by its own path so that
/// the process keeps its name) with the same `argv`; the new
/// start finds the variable set and goes on. Returns (without a message) when there is nothing
/// to do or the exec fails: the program then runs with the generic kernels, correctly but
/// slowly; also under valgrind (its preload library in LD_PRELOAD), whose tools would not follow
/// the new start, and when the program was started through the dynamic loader (`ld.so PROGRAM`,
/// where /proc/self/exe is the loader). An OPENBLAS_CORETYPE set by the user is always kept.
/// Linux only.
void reexec_with_openblas_kernels(char** argv);

}  // namespace lockstep
