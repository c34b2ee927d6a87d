// Wording shared by the CLI's messages (issue 23): numbers as a user types them, and library
// messages without the internal function names they start with.
#pragma once

#include <string>

namespace lockstep::app {

/// The shortest decimal text that reads back as `v` ("0.9", "1e-05", "300"), not printf's
/// "%.17g" ("0.90000000000000002"): how a user would type the value.
std::string typed_number(double v);

/// `line` ("--flag=value" or "--flag=v1,v2") with every number of the value as typed_number
/// writes it; other values unchanged.
std::string typed_flag(const std::string& line);

/// "1.5 GiB": `bytes` in binary units, one decimal ("512 bytes" below 1 KiB).
std::string human_bytes(long double bytes);

/// `message` without the library's internal prefixes that name code, not anything the user
/// gave: "load_state_dict into Sequential: ", "DataParallel replica on cpu:0: ", a library
/// function's name leading the message ("load_mnist_dir: ", "init_mpi: "); a bare
/// "std::bad_alloc" (an allocation that failed on a device worker) reads "out of memory".
std::string user_facing(const std::string& message);

}  // namespace lockstep::app
