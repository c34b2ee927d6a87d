# The library as one static library per layer (docs/design.md, "Layers"), and the build step that
# fails when an #include breaks the layer graph. Used by CMakeLists.txt:
#
#   lockstep_backend(<option> DIRS <src folder>... STUBS <file>...)
#   lockstep_layer(<name> DIRS <folder>... [DEPENDS <layer>...])
#   lockstep_layer_check([CONSUMERS <folder>...])
#
# A layer owns src/<folder>/ and include/lockstep/<folder>/ for each of its folders; its target
# lockstep_<name> (exported as lockstep::<name>) compiles every .cpp (and .cu with LOCKSTEP_CUDA)
# under its src/ folders, so a new file joins its layer without a CMake edit. A layer may depend
# only on layers declared before it: the graph cannot have a cycle.

# Backend folders are compiled only when <option> is on; each stub stands in for them when it is
# off (and is left out when it is on). Paths relative to the source tree.
function(lockstep_backend option)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DIRS;STUBS")
  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_BACKENDS ${option})
  set_property(GLOBAL PROPERTY LOCKSTEP_BACKEND_${option}_DIRS ${arg_DIRS})
  set_property(GLOBAL PROPERTY LOCKSTEP_BACKEND_${option}_STUBS ${arg_STUBS})
endfunction()

# Drops from the list `sources_var` (absolute paths) the files the backends' options leave out.
function(lockstep_filter_backend_sources sources_var)
  set(kept "")
  get_property(backends GLOBAL PROPERTY LOCKSTEP_BACKENDS)
  foreach(source IN LISTS ${sources_var})
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${source})
    set(keep TRUE)
    foreach(option IN LISTS backends)
      get_property(dirs GLOBAL PROPERTY LOCKSTEP_BACKEND_${option}_DIRS)
      get_property(stubs GLOBAL PROPERTY LOCKSTEP_BACKEND_${option}_STUBS)
      if(rel IN_LIST stubs)
        if(${option})
          set(keep FALSE)
        endif()
        continue()
      endif()
      foreach(dir IN LISTS dirs)
        if(NOT ${option} AND rel MATCHES "^${dir}/")
          set(keep FALSE)
        endif()
      endforeach()
    endforeach()
    if(keep)
      list(APPEND kept ${source})
    endif()
  endforeach()
  set(${sources_var} ${kept} PARENT_SCOPE)
endfunction()

function(lockstep_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DIRS;DEPENDS")
  set(target lockstep_${name})
  # Every layer below this one, directly or through another: what its files may include.
  set(below "")
  foreach(dep IN LISTS arg_DEPENDS)
    if(NOT TARGET lockstep_${dep})
      message(FATAL_ERROR "lockstep_layer(${name}): layer '${dep}' is not declared yet; declare "
                          "each layer after the layers it depends on (the graph has no cycle)")
    endif()
    get_property(dep_below GLOBAL PROPERTY LOCKSTEP_LAYER_${dep}_BELOW)
    list(APPEND below ${dep} ${dep_below})
  endforeach()
  list(REMOVE_DUPLICATES below)

  set(sources "")
  foreach(dir IN LISTS arg_DIRS)
    get_property(owner GLOBAL PROPERTY LOCKSTEP_DIR_${dir}_LAYER)
    if(owner)
      message(FATAL_ERROR "lockstep_layer(${name}): folder '${dir}' is already in layer '${owner}'")
    endif()
    set_property(GLOBAL PROPERTY LOCKSTEP_DIR_${dir}_LAYER ${name})
    set(patterns ${PROJECT_SOURCE_DIR}/src/${dir}/*.cpp)
    if(LOCKSTEP_CUDA)
      list(APPEND patterns ${PROJECT_SOURCE_DIR}/src/${dir}/*.cu)
    endif()
    file(GLOB_RECURSE found CONFIGURE_DEPENDS ${patterns})
    list(APPEND sources ${found})
  endforeach()
  lockstep_filter_backend_sources(sources)

  add_library(${target} STATIC ${sources})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  foreach(dep IN LISTS arg_DEPENDS)
    target_link_libraries(${target} PUBLIC lockstep_${dep})
  endforeach()
  # -fno-math-errno: Lockstep never reads errno after a math function, and without this flag GCC
  # keeps sqrt/exp/log scalar (to set errno) instead of vectorising them; results are unchanged.
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${LOCKSTEP_WARNINGS} -fno-math-errno>
    $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall,-Wno-unused-parameter>)

  set_property(GLOBAL APPEND PROPERTY LOCKSTEP_LAYERS ${name})
  set_property(GLOBAL PROPERTY LOCKSTEP_LAYER_${name}_DIRS ${arg_DIRS})
  set_property(GLOBAL PROPERTY LOCKSTEP_LAYER_${name}_BELOW ${below})
endfunction()

# After the last lockstep_layer(): writes the graph for cmake/check_layers.cmake to
# lockstep_layers.cmake in the build folder and adds the check as a build step every layer's
# compilation waits for. CONSUMERS: the folders (relative to the source tree) that sit on top of
# every layer and may include only include/lockstep/ and their own files. It reruns whenever a
# file under src/, include/ or a consumer folder changes; a violation fails the build, naming
# file, line and rule.
function(lockstep_layer_check)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "" "CONSUMERS")
  get_property(layers GLOBAL PROPERTY LOCKSTEP_LAYERS)
  set(rules "# Written by lockstep_layer_check() (cmake/layers.cmake): the lockstep_layer() graph.\n")
  string(APPEND rules "set(LOCKSTEP_LAYERS ${layers})\n")
  string(APPEND rules "set(LOCKSTEP_CONSUMERS ${arg_CONSUMERS})\n")
  foreach(layer IN LISTS layers)
    get_property(dirs GLOBAL PROPERTY LOCKSTEP_LAYER_${layer}_DIRS)
    get_property(below GLOBAL PROPERTY LOCKSTEP_LAYER_${layer}_BELOW)
    string(APPEND rules "set(LOCKSTEP_LAYER_${layer}_DIRS ${dirs})\n"
                        "set(LOCKSTEP_LAYER_${layer}_BELOW ${below})\n")
  endforeach()
  set(rules_file ${PROJECT_BINARY_DIR}/lockstep_layers.cmake)
  file(CONFIGURE OUTPUT ${rules_file} CONTENT "${rules}" @ONLY)  # rewritten only when changed

  set(checker ${PROJECT_SOURCE_DIR}/cmake/check_layers.cmake)
  set(globs ${PROJECT_SOURCE_DIR}/src/* ${PROJECT_SOURCE_DIR}/include/*)
  foreach(consumer IN LISTS arg_CONSUMERS)
    list(APPEND globs ${PROJECT_SOURCE_DIR}/${consumer}/*)
  endforeach()
  file(GLOB_RECURSE inputs CONFIGURE_DEPENDS ${globs})
  set(stamp ${PROJECT_BINARY_DIR}/lockstep_layers.stamp)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -DRULES=${rules_file} -DSTAMP=${stamp}
            -P ${checker}
    DEPENDS ${checker} ${rules_file} ${inputs}
    COMMENT "Checking the includes of the library and its consumers against the layer graph"
    VERBATIM)
  add_custom_target(lockstep_layer_check ALL DEPENDS ${stamp})
  foreach(layer IN LISTS layers)
    add_dependencies(lockstep_${layer} lockstep_layer_check)
  endforeach()
  set(LOCKSTEP_LAYER_RULES ${rules_file} PARENT_SCOPE)
endfunction()
