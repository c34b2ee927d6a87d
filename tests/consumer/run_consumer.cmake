# The test install.consumer: `cmake --install`s the build into a fresh prefix, then configures,
# builds and runs the consumer project (this folder) against it with find_package(lockstep). So
# the installed package (every layer's static library, lockstepTargets.cmake, the dependencies
# lockstepConfig.cmake finds) is checked as a user gets it, not as the build tree sees it.
#
#   cmake -DBUILD=<lockstep build folder> -DWORK=<scratch folder> -DGENERATOR=<generator>
#         -DCXX=<C++ compiler> -DLAYERS=<layer,names> [-DLAUNCHER=<ccache>]
#         [-DSANITIZE=<sanitizers>] -P tests/consumer/run_consumer.cmake
cmake_minimum_required(VERSION 3.25)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message(STATUS "install.consumer: ${what}\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install.consumer: ${what} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
set(consumer_build ${WORK}/build)

step("install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})

set(options -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
            -DCMAKE_CXX_COMPILER=${CXX} "-DLOCKSTEP_EXPECTED_LAYERS=${LAYERS}")
if(LAUNCHER)
  list(APPEND options -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
# A sanitized build installs instrumented libraries: the program must link the runtimes too.
if(SANITIZE)
  list(APPEND options "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZE} -fno-sanitize-recover=all"
                      "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
get_filename_component(source ${CMAKE_CURRENT_LIST_FILE} DIRECTORY)
step("configure" ${CMAKE_COMMAND} -S ${source} -B ${consumer_build} -G ${GENERATOR} ${options})
step("build" ${CMAKE_COMMAND} --build ${consumer_build})
step("run" ${consumer_build}/consumer)
