# cmake -DNM=<nm> -DOBJ=<consumer object> -DLIB=<libmemsafe_precompiled.a> -DEXPECTED=<n> -DUSED=<n> -P check_objects.cmake
# The consumer's object must define none of the memsafe::host::run<...> the library defines and
# leave exactly USED of them undefined — one reference per listed expression type it evaluates: had
# it compiled one itself, the reference would be resolved (or inlined) inside the object. The
# library must define EXPECTED distinct ones (11 formulas × 2 value types × 19 expressions). (The
# consumer's own evaluations, outside the list, may be inlined into their callers: not counted.)
cmake_minimum_required(VERSION 3.25)

function(symbols out file mode)
  execute_process(COMMAND ${NM} -C ${mode} ${file} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${mode} ${file} failed: ${err}")
  endif()
  string(REGEX MATCHALL "memsafe::host::run<[^\n]*" found "${text}")
  list(REMOVE_DUPLICATES found)
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

symbols(defined "${OBJ}" --defined-only)
symbols(used "${OBJ}" --undefined-only)
symbols(lib "${LIB}" --defined-only)
list(LENGTH defined nd)
list(LENGTH used nu)
list(LENGTH lib nl)
set(twice "")
foreach(sym IN LISTS defined)
  if(sym IN_LIST lib)
    list(APPEND twice "${sym}")
  endif()
endforeach()
list(LENGTH twice nt)
message(STATUS "consumer object: ${nd} defined (${nt} of them also in the library), ${nu} referred to; "
               "library: ${nl} defined")
if(NOT nt EQUAL 0)
  list(GET twice 0 first)
  message(FATAL_ERROR "the consumer compiled ${nt} evaluations memsafe::precompiled holds, e.g. ${first}")
endif()
if(NOT nu EQUAL USED)
  message(FATAL_ERROR "the consumer refers to ${nu} of the library's evaluations, expected ${USED}: ${used}")
endif()
if(NOT nl EQUAL EXPECTED)
  message(FATAL_ERROR "the library defines ${nl} evaluations, expected ${EXPECTED}")
endif()
