# The course's main job (`cmake --workflow --preset course`, or the `course`
# target): run the CPU reference tests, then every stage's default run: each
# variant checked against the CPU reference and timed. Without a GPU the stages
# report that no CUDA device was found and this still succeeds.
execute_process(COMMAND ${CTEST} --test-dir ${BUILD_DIR} -L cpu --output-on-failure
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "CPU tests failed (ctest -L cpu)")
endif()
string(REPLACE "|" ";" stages "${STAGES}")
set(failed "")
foreach(stage IN LISTS stages)
  message("\n================ ${stage} ================")
  execute_process(COMMAND ${BIN_DIR}/${stage} RESULT_VARIABLE rc)
  if(rc EQUAL 77)
    message("\nNo CUDA device found. Every stage was built and the CPU reference tests passed;"
            "\nthe GPU variants were not run. Run this again on a machine with an NVIDIA GPU.")
    return()
  elseif(NOT rc EQUAL 0)
    list(APPEND failed ${stage})
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "stages with failed checks: ${failed}")
endif()
message("\nEvery stage ran; every variant matched its CPU reference.")
