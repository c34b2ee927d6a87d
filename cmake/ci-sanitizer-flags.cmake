# Initial cache for CI's sanitizer builds (cmake -C): RelWithDebInfo at -O1 with line tables
# only (-g1). AddressSanitizer's own guidance is -O1 for usable reports at a reasonable speed;
# line tables are all a sanitizer stack trace needs. Against CMake's default -O2 -g this cuts
# the compile time of a test file by about a third (tests/parallel/data_parallel_test.cpp under
# ASan+UBSan: 30.9 s -> 21.3 s on the 2-core CI machine), which is most of CI's budget.
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG" CACHE STRING "CI sanitizer builds")
