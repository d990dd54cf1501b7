# Helpers every stage uses: wb_add_stage() builds a stage program and registers
# its tests the same way for every stage (see docs/method.md and docs/adding_a_stage.md).

# Is a GPU here? (decides the sanitizer tests; the architectures are chosen in
# the top-level CMakeLists.txt before project()).
find_program(WB_COMPUTE_SANITIZER compute-sanitizer
             HINTS ${CUDAToolkit_BIN_DIR} /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer)
set(WB_SANITIZER_TESTS OFF)
if(WB_COMPUTE_SANITIZER AND WB_GPU_FOUND)
  set(WB_SANITIZER_TESTS ON)
endif()

# wb_add_exit_tests(<stageNN> <target> <case>...): one cpu test per case, each
# "name|expected exit code|arg|arg|...|regex the output must match", run
# through cmake/ExpectExit.cmake. Stages with arguments of their own (stage 10's
# weights files) add their cases with it too.
function(wb_add_exit_tests stage target)
  foreach(case IN LISTS ARGN)
    string(REPLACE "|" ";" fields "${case}")
    list(POP_FRONT fields test_name expect_rc)
    list(POP_BACK fields expect_regex)
    string(REPLACE ";" "|" test_args "${fields}")
    add_test(NAME ${stage}_${test_name}
             COMMAND ${CMAKE_COMMAND} "-DPROGRAM=$<TARGET_FILE:${target}>" "-DARGS=${test_args}"
                     "-DEXPECT_RC=${expect_rc}" "-DEXPECT_REGEX=${expect_regex}"
                     -P ${PROJECT_SOURCE_DIR}/cmake/ExpectExit.cmake)
    set_tests_properties(${stage}_${test_name} PROPERTIES LABELS "${stage};cpu")
  endforeach()
endfunction()

# The exercise slot: each stage's exercise.cu (variant ex), or the file the option
# WB_EXERCISE_<NN> names instead (a path, relative to the source tree or absolute):
# how the sample kernels in tests/exercises/ are built into the slot, e.g.
#   cmake -B build-ex -DWB_EXERCISE_01=tests/exercises/stage01_right.cu
# wb_exercise_source(<NN> <var>) sets <var> to the file to compile.
function(wb_exercise_source number var)
  if(DEFINED WB_EXERCISE_${number} AND NOT WB_EXERCISE_${number} STREQUAL "")
    get_filename_component(file ${WB_EXERCISE_${number}} ABSOLUTE BASE_DIR ${PROJECT_SOURCE_DIR})
    if(NOT EXISTS ${file})
      message(FATAL_ERROR "WB_EXERCISE_${number}: no file ${file}")
    endif()
    message(STATUS "stage ${number}: the exercise slot holds ${file}")
  else()
    set(file ${CMAKE_CURRENT_SOURCE_DIR}/exercise.cu)
  endif()
  set(${var} ${file} PARENT_SCOPE)
endfunction()

# wb_add_stage(<NN> <name>
#              SOURCES <files...>            main.c kernels.cu
#              [LIBRARIES <libs...>]         e.g. CUDA::cublas
#              SIZE_OPTION <--n>             the option that sets the problem size
#              [SIZE_COUNT <k>]              how many integers it takes (3 for --size M N K)
#              [MEMCHECK_ARGS <args...>]     extra arguments for memcheck's run of --check
#              [RACECHECK_ARGS <args...>]    and for racecheck's (slower: it tracks shared memory)
#              [SANITIZE_VARIANTS <ids...>]) a sanitizer test per variant (stageNN_memcheck_v3, ...), so that
#                                            the sanitize preset runs them side by side
function(wb_add_stage number name)
  cmake_parse_arguments(S "" "SIZE_OPTION;SIZE_COUNT" "SOURCES;LIBRARIES;MEMCHECK_ARGS;RACECHECK_ARGS;SANITIZE_VARIANTS"
                        ${ARGN})
  if(NOT S_SIZE_COUNT)
    set(S_SIZE_COUNT 1)
  endif()
  set(stage stage${number})
  set(target ${stage}_${name})
  add_executable(${target} ${S_SOURCES})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${target} PRIVATE wb_common wb_reference ${S_LIBRARIES})
  set_property(GLOBAL APPEND PROPERTY WB_STAGE_TARGETS ${target})

  # gpu: the correctness sweep; skipped (77) without a device.
  add_test(NAME ${stage}_check COMMAND ${target} --check)
  set_tests_properties(${stage}_check PROPERTIES SKIP_RETURN_CODE 77 LABELS "${stage};gpu")

  # gpu: the exercise slot's check (variant ex, exercise.cu): skipped (77), with the
  # message, while the slot holds the stub.
  add_test(NAME ${stage}_exercise COMMAND ${target} --check --variant ex)
  set_tests_properties(${stage}_exercise PROPERTIES SKIP_RETURN_CODE 77 LABELS "${stage};gpu")

  # cpu: --help works, and every kind of bad argument exits 2 with a message
  # that says what is allowed. Arguments are '|'-separated for ExpectExit.cmake.
  string(REPEAT "|0" ${S_SIZE_COUNT} zeros)
  string(REPEAT "|-5" ${S_SIZE_COUNT} negatives)
  string(REPEAT "|abc" ${S_SIZE_COUNT} words)
  set(cases
    "help|0|--help|usage: ${target}"
    "args_unknown_flag|2|--bogus|unknown option '--bogus' \\(allowed: "
    "args_size_zero|2|${S_SIZE_OPTION}${zeros}|${S_SIZE_OPTION} wants an integer in 1\\.\\."
    "args_size_negative|2|${S_SIZE_OPTION}${negatives}|${S_SIZE_OPTION} wants an integer in 1\\.\\."
    "args_size_not_a_number|2|${S_SIZE_OPTION}${words}|${S_SIZE_OPTION} wants an integer in 1\\.\\..*got 'abc'"
    "args_size_missing|2|${S_SIZE_OPTION}|${S_SIZE_OPTION} needs ${S_SIZE_COUNT} value"
    "args_unknown_variant|2|--variant|v99|unknown variant 'v99' \\(allowed: v1 "
    "args_variant_out_of_range|2|--variant|0|unknown variant '0' \\(allowed: .*a number 1\\.\\."
    "args_iters_zero|2|--iters|0|--iters wants an integer in 1\\.\\.")
  wb_add_exit_tests(${stage} ${target} ${cases})

  # sanitize: the four compute-sanitizer tools over the --check sweep, where both
  # a GPU and compute-sanitizer are present: memcheck (out-of-bounds and
  # misaligned accesses, leaks), racecheck (shared-memory hazards), initcheck
  # (reads of device memory nothing wrote) and synccheck (barriers not reached by
  # every thread they name). Every finding is fixed, never suppressed.
  if(WB_SANITIZER_TESTS)
    set(parts "") # "": one test of every variant; else one test per variant, named after it
    set(variant_args "")
    if(S_SANITIZE_VARIANTS)
      set(parts ${S_SANITIZE_VARIANTS})
    else()
      list(APPEND parts "all")
    endif()
    foreach(part IN LISTS parts)
      if(part STREQUAL "all")
        set(suffix "")
        set(variant_args "")
      else()
        set(suffix "_${part}")
        set(variant_args --variant ${part})
      endif()
      set(program $<TARGET_FILE:${target}> --check ${variant_args})
      add_test(NAME ${stage}_initcheck${suffix}
               COMMAND ${WB_COMPUTE_SANITIZER} --tool initcheck --error-exitcode 1 ${program} ${S_MEMCHECK_ARGS})
      add_test(NAME ${stage}_synccheck${suffix}
               COMMAND ${WB_COMPUTE_SANITIZER} --tool synccheck --error-exitcode 1 ${program} ${S_MEMCHECK_ARGS})
      add_test(NAME ${stage}_memcheck${suffix}
               COMMAND ${WB_COMPUTE_SANITIZER} --tool memcheck --leak-check full --error-exitcode 1 ${program}
                       ${S_MEMCHECK_ARGS})
      add_test(NAME ${stage}_racecheck${suffix}
               COMMAND ${WB_COMPUTE_SANITIZER} --tool racecheck --racecheck-report all --error-exitcode 1 ${program}
                       ${S_RACECHECK_ARGS})
      set_tests_properties(${stage}_initcheck${suffix} ${stage}_synccheck${suffix} ${stage}_memcheck${suffix}
                           ${stage}_racecheck${suffix} PROPERTIES
                           SKIP_RETURN_CODE 77 LABELS "${stage};gpu;sanitize" TIMEOUT 1800)
    endforeach()
  endif()
endfunction()
