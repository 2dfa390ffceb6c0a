# Every doctest case must be one CTest test: doctest_discover_tests turns each name into a CTest
# name, and CMake splits a name at ';' into two tests that match no case and pass having run
# nothing. Fails, naming them, when a case's name has a ';'.
#   cmake -DEXE=<test executable> -P check_test_names.cmake
execute_process(COMMAND ${EXE} --list-test-cases --no-version OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --list-test-cases failed (${rc})")
endif()
string(REPLACE ";" "<semicolon>" out "${out}")
string(REPLACE "\n" ";" lines "${out}")
set(bad "")
foreach(line IN LISTS lines)
  if(line MATCHES "<semicolon>")
    string(REPLACE "<semicolon>" ";" line "${line}")
    string(APPEND bad "\n  ${line}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "test case names with ';' (CTest would split them and run nothing):${bad}")
endif()
message(STATUS "no test case name has a ';'")
