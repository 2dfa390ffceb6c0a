# Configure, build and run tests/consumer against memsafe. Run as:
#   cmake -DMODE=add_subdirectory|find_package -DMEMSAFE_SOURCE_DIR=<root>
#         -DCONSUMER_DIR=<tests/consumer> -DWORK_DIR=<scratch dir>
#         [-DCXX=<compiler>] [-DGENERATOR=<generator>] -P run.cmake
foreach(var MODE MEMSAFE_SOURCE_DIR CONSUMER_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(common_args -DCMAKE_BUILD_TYPE=Release)
if(DEFINED CXX AND NOT CXX STREQUAL "")
  list(APPEND common_args -DCMAKE_CXX_COMPILER=${CXX})
endif()
if(DEFINED GENERATOR AND NOT GENERATOR STREQUAL "")
  list(APPEND common_args -G ${GENERATOR})
endif()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer.${MODE}: ${what} failed (exit ${rc})\n"
      "command: ${ARGN}\n--- output ---\n${out}")
  endif()
  string(STRIP "${out}" out)
  if(what STREQUAL "run consumer" AND NOT out STREQUAL "")
    message(STATUS "consumer.${MODE}: ${what} ok: ${out}")
  else()
    message(STATUS "consumer.${MODE}: ${what} ok")
  endif()
endfunction()

set(dir ${WORK_DIR}/${MODE})
file(REMOVE_RECURSE ${dir})
file(MAKE_DIRECTORY ${dir})

if(MODE STREQUAL "add_subdirectory")
  set(consumer_args -DMEMSAFE_CONSUMER_MODE=subdir -DMEMSAFE_SOURCE_DIR=${MEMSAFE_SOURCE_DIR})
elseif(MODE STREQUAL "find_package")
  set(prefix ${dir}/prefix)
  run_step("configure memsafe"
    ${CMAKE_COMMAND} -S ${MEMSAFE_SOURCE_DIR} -B ${dir}/memsafe-build ${common_args}
      -DMEMSAFE_BUILD_TESTS=OFF -DMEMSAFE_BUILD_EXAMPLES=OFF -DMEMSAFE_BUILD_BENCH=OFF
      -DCMAKE_INSTALL_PREFIX=${prefix})
  run_step("build memsafe" ${CMAKE_COMMAND} --build ${dir}/memsafe-build --parallel 2)   # memsafe::precompiled
  run_step("install memsafe" ${CMAKE_COMMAND} --install ${dir}/memsafe-build)
  set(consumer_args -DMEMSAFE_CONSUMER_MODE=package -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
else()
  message(FATAL_ERROR "run.cmake: unknown MODE '${MODE}'")
endif()

run_step("configure consumer"
  ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${dir}/consumer-build ${common_args} ${consumer_args})
run_step("build consumer" ${CMAKE_COMMAND} --build ${dir}/consumer-build)

find_program(exe memsafe_consumer PATHS ${dir}/consumer-build ${dir}/consumer-build/Release
  NO_DEFAULT_PATH REQUIRED)
run_step("run consumer" ${exe})

# The memsafe::precompiled consumer (package mode).
if(MODE STREQUAL "find_package")
  find_program(exe_pc memsafe_consumer_precompiled PATHS ${dir}/consumer-build ${dir}/consumer-build/Release
    NO_DEFAULT_PATH REQUIRED)
  run_step("run consumer" ${exe_pc})
endif()

# The memsafe::mpi consumer, built when MPI was found: run as one process (MPI's singleton mode).
find_program(exe_mpi memsafe_consumer_mpi PATHS ${dir}/consumer-build ${dir}/consumer-build/Release NO_DEFAULT_PATH)
if(exe_mpi)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  run_step("run consumer" ${exe_mpi})
else()
  message(STATUS "consumer.${MODE}: no memsafe::mpi (MPI not found): the MPI consumer is not built")
endif()

# The memsafe::nccl consumer (package mode), built where the install has the component and nvcc is
# found: not run, NCCL's communicators need GPUs.
find_program(exe_nccl memsafe_consumer_nccl PATHS ${dir}/consumer-build ${dir}/consumer-build/Release NO_DEFAULT_PATH)
if(exe_nccl)
  message(STATUS "consumer.${MODE}: memsafe_consumer_nccl built against memsafe::nccl (not run: needs GPUs)")
elseif(MODE STREQUAL "find_package")
  message(STATUS "consumer.${MODE}: no memsafe::nccl in the install, or no nvcc here: the NCCL consumer is not built")
endif()
