# The test layers.check: the layer check (cmake/check_layers.cmake) with the build's own graph
# (RULES, written by lockstep_layer_check(): the layers and the consumers app/ and python/src/)
# passes the real tree, passes a fixture tree whose includes all go down the graph through the
# layers' interfaces, and fails that tree once files with bad includes are added, naming each
# file, line and rule. So the check the build runs cannot pass by finding nothing.
#
#   cmake -DCHECKER=<check_layers.cmake> -DRULES=<lockstep_layers.cmake> -DROOT=<source tree>
#         -DWORK=<scratch folder> -P tests/layers/check_layers_test.cmake
cmake_minimum_required(VERSION 3.25)

function(run_checker root out_rc out_log)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOT=${root} -DRULES=${RULES} -P ${CHECKER}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE log ERROR_VARIABLE log)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_log} "${log}" PARENT_SCOPE)
endfunction()

function(fail what log)
  message(FATAL_ERROR "layers.check: ${what}\n--- checker output ---\n${log}")
endfunction()

# Writes WORK/tree/<path> with the given lines (one #include each, at lines 1, 2, ...).
function(write path)
  list(JOIN ARGN "\n" text)
  file(WRITE ${WORK}/tree/${path} "${text}\n")
endfunction()

# 1. The project itself.
run_checker(${ROOT} rc log)
if(NOT rc EQUAL 0)
  fail("the source tree breaks the layer graph" "${log}")
endif()

# 2. A tree whose includes all go down (or stay in their layer): passes.
file(REMOVE_RECURSE ${WORK}/tree)
write(include/lockstep/core/tensor.h "#pragma once")
write(include/lockstep/ops/ops.h "#include \"lockstep/core/tensor.h\"")
write(include/lockstep/nn/module.h "#include \"lockstep/ops/ops.h\"")
write(include/lockstep/lockstep.h "#include \"lockstep/nn/module.h\"")
write(src/parallel/detail.h "#include \"lockstep/nn/module.h\"")
write(src/ops/local.h "#pragma once")
write(src/ops/ops.cpp "#include <vector>" "#include \"lockstep/ops/ops.h\"" "#include \"local.h\""
      "#include \"core/missing.h\"")
write(src/autograd/engine.cpp "#include \"ops/local.h\"")  # ops and autograd: one layer
write(include/lockstep/ops/detail/kernel.h "#include \"lockstep/core/tensor.h\"")
write(src/nn/linear.cpp "#include \"lockstep/ops/detail/kernel.h\"")  # an interface for layers above
write(src/dist/group.cpp "#include <lockstep/core/tensor.h>" "  #  include \"cblas.h\"")
write(app/cli.h "#pragma once")
write(app/train/loop.cpp "#include \"lockstep/lockstep.h\"" "#include \"cli.h\"" "#include \"../cli.h\""
      "#include <nanobind/nanobind.h>")
write(python/src/bind.cpp "#include <nanobind/nanobind.h>" "#include \"lockstep/nn/module.h\"")
write(tests/white_box.cpp "#include \"ops/local.h\"")  # tests may look inside a layer
run_checker(${WORK}/tree rc log)
if(NOT rc EQUAL 0)
  fail("a tree without violations was refused" "${log}")
endif()

# 3. The same tree with one file per rule broken: fails, reporting each.
write(src/core/bad.cpp "#include <cstring>" "" "#include \"lockstep/ops/ops.h\"")
write(src/dist/bad.cpp "// dist knows no modules" "#include <lockstep/nn/module.h>")
write(src/nn/bad.h "#pragma once" "#include \"parallel/detail.h\"  // a; comment [x]")
write(src/io/bad.cpp "#include \"../../app/cli.h\"")
write(src/data/bad.cpp "#include \"lockstep/lockstep.h\"")
write(src/gizmo/thing.cpp "#include \"lockstep/core/tensor.h\"")
write(src/optim/private.cpp "#include \"lockstep/nn/module.h\"" "#include \"ops/local.h\"")
write(include/lockstep/nn/leaky.h "#pragma once" "#include \"ops/local.h\"")
write(app/bad.cpp "#include \"../src/ops/local.h\"")
write(python/src/bad.cpp "#include \"../../app/cli.h\"")
set(expected
  "src/core/bad.cpp:3: #include \"lockstep/ops/ops.h\": layer core reaches include/lockstep/ops/ops.h of layer ops, which is not below it: core may include only core"
  "src/dist/bad.cpp:2: #include <lockstep/nn/module.h>: layer dist reaches include/lockstep/nn/module.h of layer nn, which is not below it: dist may include only dist, ops, core"
  "src/nn/bad.h:2: #include \"parallel/detail.h\": layer nn reaches src/parallel/detail.h of layer parallel"
  "src/io/bad.cpp:1: #include \"../../app/cli.h\": reaches app/cli.h, outside the library"
  "src/data/bad.cpp:1: #include \"lockstep/lockstep.h\": includes the umbrella header include/lockstep/lockstep.h"
  "src/gizmo/thing.cpp: src/gizmo/ belongs to no layer"
  "src/optim/private.cpp:2: #include \"ops/local.h\": layer optim reaches src/ops/local.h, private to layer ops: include its interface, include/lockstep/ops/"
  "include/lockstep/nn/leaky.h:2: #include \"ops/local.h\": the public header reaches src/ops/local.h, private to the library"
  "app/bad.cpp:1: #include \"../src/ops/local.h\": reaches src/ops/local.h, private to the library: app/ sits on top of every layer"
  "python/src/bad.cpp:1: #include \"../../app/cli.h\": reaches app/cli.h, outside the library and python/src/"
  "layer check: 10 violation(s)")
run_checker(${WORK}/tree rc log)
if(rc EQUAL 0)
  fail("a tree with 10 bad includes passed" "${log}")
endif()
string(REGEX REPLACE "[ \n]+" " " flat "${log}")  # CMake wraps the final error message
foreach(line IN LISTS expected)
  string(FIND "${flat}" "${line}" at)
  if(at EQUAL -1)
    fail("expected in the output: ${line}" "${log}")
  endif()
endforeach()
foreach(good src/ops/ops.cpp src/dist/group.cpp src/parallel/detail.h src/autograd/engine.cpp
             src/nn/linear.cpp include/lockstep/ops/detail/kernel.h app/train/loop.cpp
             python/src/bind.cpp tests/white_box.cpp)
  string(FIND "${log}" "${good}:" at)  # as the file of a report, not as an include's target
  if(NOT at EQUAL -1)
    fail("${good} (no violation) was reported" "${log}")
  endif()
endforeach()
message(STATUS "layers.check: the tree passes; 10 kinds of bad include fail with file, line, rule")
