# Run PROGRAM with ARGS ('|'-separated) and pass only if it exits with EXPECT_RC
# and its output (stdout + stderr) matches EXPECT_REGEX. CTest alone cannot ask
# for both: PASS_REGULAR_EXPRESSION ignores the exit code.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${PROGRAM}" ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(NOT "${rc}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit code ${EXPECT_RC}, got ${rc}; output:\n${all}")
endif()
if(NOT all MATCHES "${EXPECT_REGEX}")
  message(FATAL_ERROR "output does not match '${EXPECT_REGEX}':\n${all}")
endif()
message(STATUS "exit ${rc} as expected; output: ${all}")
