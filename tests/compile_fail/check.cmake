# Compile-fail check, run as:
#   cmake -DCXX=<compiler> -DSRC=<file.cpp> -DINCLUDE=<include dir> -P check.cmake
# SRC's first line must be `// EXPECT: <regex>` (CMake regex syntax), its second may be
# `// FLAGS: <flags>`. The compile (-std=c++20 -fsyntax-only, plus those flags) must FAIL and its
# output must match the regex.
foreach(var CXX SRC INCLUDE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check.cmake: -D${var}=... is required")
  endif()
endforeach()

file(STRINGS "${SRC}" first_line LIMIT_COUNT 1)
if(NOT first_line MATCHES "^[ \t]*//[ \t]*EXPECT:[ \t]*(.+)$")
  message(FATAL_ERROR "${SRC}: first line must be `// EXPECT: <regex>`, got: `${first_line}`")
endif()
string(STRIP "${CMAKE_MATCH_1}" expect)
# An optional second line `// FLAGS: <compiler flags>` adds flags to the compile.
file(STRINGS "${SRC}" first_two LIMIT_COUNT 2)
set(flags "")
list(LENGTH first_two nlines)
if(nlines GREATER 1)
  list(GET first_two 1 second_line)
  if(second_line MATCHES "^[ \t]*//[ \t]*FLAGS:[ \t]*(.+)$")
    string(STRIP "${CMAKE_MATCH_1}" flags)
    separate_arguments(flags UNIX_COMMAND "${flags}")
  endif()
endif()

# LC_ALL=C: plain ASCII quotes in diagnostics, so regexes are predictable.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env LC_ALL=C
          ${CXX} -std=c++20 -fsyntax-only -fdiagnostics-color=never ${flags} -I${INCLUDE} ${SRC}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)

if(rc EQUAL 0)
  message(FATAL_ERROR "${SRC}: compiled successfully, but it must NOT compile.\n${out}")
endif()
if(NOT out MATCHES "${expect}")
  message(FATAL_ERROR "${SRC}: failed to compile as required (exit ${rc}), "
    "but the output does not match EXPECT regex `${expect}`.\n--- compiler output ---\n${out}")
endif()
message(STATUS "${SRC}: fails to compile as expected (matched `${expect}`)")
