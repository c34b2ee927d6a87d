# The layer check (docs/design.md, "Layers"): every #include in the library must reach a file of
# its own layer or of a layer below it, and another layer's files only through its interface,
# include/lockstep/<layer>/. Run by every build before the library compiles (lockstep_layer_check
# in cmake/layers.cmake) and by the test layers.check (tests/layers/):
#
#   cmake -DROOT=<source tree> -DRULES=<rules file> [-DSTAMP=<file>] -P cmake/check_layers.cmake
#
# RULES is the file lockstep_layer_check() writes from the lockstep_layer() calls in
# CMakeLists.txt, so the graph is written once: LOCKSTEP_LAYERS (bottom first) and, per layer,
# LOCKSTEP_LAYER_<name>_DIRS (its folders: src/<dir>/ and include/lockstep/<dir>/) and
# LOCKSTEP_LAYER_<name>_BELOW (every layer it depends on, directly or not); LOCKSTEP_CONSUMERS,
# the folders that sit on top of every layer (the CLI app/, the Python binding python/src/).
#
# Scans src/ and include/ of ROOT and the consumer folders (.h .hpp .cpp .cu .cuh). An include is
# resolved as the compiler does: "x" beside the including file, then (from a consumer) the
# consumer's folder, then include/x, then src/x; <x> the same without the file's own folder; a
# name found in none of them (system and third-party headers) is not the library's. It fails,
# printing file:line, the include and the rule it breaks, when an include from the library
# reaches
#   - a layer that is not the file's own or below it;
#   - another layer's private folder src/<dir>/ (a layer's src/ is its own; what the layers above
#     use lies in include/lockstep/<dir>/, in detail/ when it is not for users);
#   - src/ at all from a public header (installed users have no src/);
#   - a file outside the library (app/, tests/, ...), or the umbrella header lockstep/lockstep.h;
# when an include from a consumer reaches src/ (consumers use the installed interface, as
# find_package(lockstep) users do) or a file outside the library and that consumer; and when a
# library file lies in a folder that belongs to no layer. On success it touches STAMP.
cmake_minimum_required(VERSION 3.25)
cmake_policy(SET CMP0007 NEW)  # lists keep empty elements: one element per source line

foreach(var ROOT RULES)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_layers.cmake: -D${var}=... is required")
  endif()
endforeach()
include(${RULES})
cmake_path(ABSOLUTE_PATH ROOT NORMALIZE)
string(REGEX REPLACE "/$" "" ROOT "${ROOT}")

foreach(layer IN LISTS LOCKSTEP_LAYERS)
  foreach(dir IN LISTS LOCKSTEP_LAYER_${layer}_DIRS)
    set(layer_of_dir_${dir} ${layer})
  endforeach()
endforeach()

# The layer of `rel` (a path relative to ROOT): a layer's name; "<umbrella>" for the headers
# directly in include/lockstep/; "<none>:<folder>" for a library folder of no layer; "" outside
# the library.
function(layer_of rel out)
  set(layer "")
  if(rel MATCHES "^(src|include/lockstep)/([^/]+)/")
    if(DEFINED layer_of_dir_${CMAKE_MATCH_2})
      set(layer ${layer_of_dir_${CMAKE_MATCH_2}})
    else()
      set(layer "<none>:${CMAKE_MATCH_1}/${CMAKE_MATCH_2}/")
    endif()
  elseif(rel MATCHES "^include/lockstep/[^/]+$")
    set(layer "<umbrella>")
  elseif(rel MATCHES "^(src|include)/")
    set(layer "<none>:${CMAKE_MATCH_1}/")
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

# The consumer folder (of LOCKSTEP_CONSUMERS) that holds `rel`, or "".
function(consumer_of rel out)
  set(found "")
  foreach(consumer IN LISTS LOCKSTEP_CONSUMERS)
    if(rel MATCHES "^${consumer}/")
      set(found ${consumer})
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The first existing candidate for `name` included from `rel` (relative to ROOT), or "".
function(resolve rel name delimiter out)
  set(candidates ${ROOT}/include/${name} ${ROOT}/src/${name})
  consumer_of(${rel} consumer)
  if(consumer)
    list(PREPEND candidates ${ROOT}/${consumer}/${name})
  endif()
  if(delimiter STREQUAL "\"")
    cmake_path(GET rel PARENT_PATH dir)
    list(PREPEND candidates ${ROOT}/${dir}/${name})
  endif()
  set(found "")
  foreach(candidate IN LISTS candidates)
    if(EXISTS ${candidate} AND NOT IS_DIRECTORY ${candidate})
      cmake_path(NORMAL_PATH candidate OUTPUT_VARIABLE found)
      file(RELATIVE_PATH found ${ROOT} ${found})
      break()
    endif()
  endforeach()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

# The line number of `line` (as file(STRINGS) returned it) in ROOT/rel. Only called for a
# violation: brackets and semicolons are neutralised so that the file splits into one list
# element per line.
function(line_number rel line out)
  file(READ ${ROOT}/${rel} text)
  string(REGEX REPLACE "[][;\\\r]" "_" text "${text}")
  string(REGEX REPLACE "[][;\\]" "_" line "${line}")
  string(REPLACE "\n" ";" lines "${text}")
  list(FIND lines "${line}" index)
  math(EXPR number "${index} + 1")
  set(${out} ${number} PARENT_SCOPE)
endfunction()

function(allowed_text layer out)
  set(layers ${layer} ${LOCKSTEP_LAYER_${layer}_BELOW})
  list(JOIN layers ", " text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# The rule an include from consumer file `rel` to `target` breaks, or "".
function(consumer_rule rel target out)
  consumer_of(${rel} consumer)
  set(rule "")
  if(target MATCHES "^src/")
    string(CONCAT rule "reaches ${target}, private to the library: ${consumer}/ sits on top of "
                       "every layer and includes only their interface, include/lockstep/")
  elseif(NOT target MATCHES "^include/lockstep/" AND NOT target MATCHES "^${consumer}/")
    string(CONCAT rule "reaches ${target}, outside the library and ${consumer}/: ${consumer}/ "
                       "includes only include/lockstep/ and its own files")
  endif()
  set(${out} "${rule}" PARENT_SCOPE)
endfunction()

set(violations "")
set(globs ${ROOT}/src/* ${ROOT}/include/*)
foreach(consumer IN LISTS LOCKSTEP_CONSUMERS)
  list(APPEND globs ${ROOT}/${consumer}/*)
endforeach()
file(GLOB_RECURSE files LIST_DIRECTORIES false RELATIVE ${ROOT} ${globs})
list(FILTER files INCLUDE REGEX "\\.(h|hpp|cpp|cu|cuh)$")
list(SORT files)
foreach(rel IN LISTS files)
  layer_of(${rel} layer)
  consumer_of(${rel} consumer)
  if(layer STREQUAL "" AND NOT consumer)
    continue()
  elseif(layer MATCHES "^<none>:(.*)")
    string(CONCAT violation "${rel}: ${CMAKE_MATCH_1} belongs to no layer: add the folder to "
                            "a lockstep_layer(... DIRS ...) in CMakeLists.txt")
    list(APPEND violations "${violation}")
    continue()
  elseif(layer STREQUAL "<umbrella>")
    continue()  # lockstep.h includes every layer, for users; the library never includes it
  endif()
  file(STRINGS ${ROOT}/${rel} includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]+[\">]")
  foreach(line IN LISTS includes)
    string(REGEX MATCH "include[ \t]*([\"<])([^\">]+)" _ "${line}")
    set(delimiter "${CMAKE_MATCH_1}")
    set(name "${CMAKE_MATCH_2}")
    resolve(${rel} "${name}" "${delimiter}" target)
    if(target STREQUAL "")
      continue()
    endif()
    layer_of(${target} target_layer)
    set(rule "")
    if(consumer)
      consumer_rule(${rel} ${target} rule)
    elseif(target_layer STREQUAL "")
      string(CONCAT rule "reaches ${target}, outside the library (src/, include/lockstep/): "
                         "the library never includes app/, tests/ or other project code")
    elseif(target_layer STREQUAL "<umbrella>")
      string(CONCAT rule "includes the umbrella header ${target} (every layer): include "
                         "the headers of the layers it needs")
    elseif(target_layer MATCHES "^<none>")
      continue()  # reported once, for that file itself
    elseif(NOT target_layer STREQUAL layer
           AND NOT target_layer IN_LIST LOCKSTEP_LAYER_${layer}_BELOW)
      allowed_text(${layer} allowed)
      string(CONCAT rule "layer ${layer} reaches ${target} of layer ${target_layer}, which "
                         "is not below it: ${layer} may include only ${allowed}")
    elseif(target MATCHES "^src/" AND rel MATCHES "^include/")
      string(CONCAT rule "the public header reaches ${target}, private to the library: "
                         "installed users have no src/ (move what it needs to include/lockstep/)")
    elseif(target MATCHES "^src/([^/]+)/" AND NOT target_layer STREQUAL layer)
      string(CONCAT rule "layer ${layer} reaches ${target}, private to layer ${target_layer}: "
                         "include its interface, include/lockstep/${CMAKE_MATCH_1}/ (detail/ "
                         "for what is not for users), moving the header there if it is one")
    endif()
    if(NOT rule STREQUAL "")
      line_number(${rel} "${line}" number)
      if(delimiter STREQUAL "<")
        set(directive "#include <${name}>")
      else()
        set(directive "#include \"${name}\"")
      endif()
      list(APPEND violations "${rel}:${number}: ${directive}: ${rule}")
    endif()
  endforeach()
endforeach()

if(violations)
  list(LENGTH violations count)
  foreach(violation IN LISTS violations)
    message(NOTICE "${violation}")
  endforeach()
  message(FATAL_ERROR "layer check: ${count} violation(s) of the layer graph (docs/design.md, "
                      "\"Layers\"; layers declared by lockstep_layer() in CMakeLists.txt)")
endif()
if(DEFINED STAMP)
  file(TOUCH ${STAMP})
endif()
