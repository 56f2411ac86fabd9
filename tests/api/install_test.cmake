# cmake -P script: `cmake --install` the build into a fresh temporary prefix, configure and
# build tests/api/consumer and examples/finetune_service against it with only
# find_package(onnx_mirror), and run the consumer. Fails on the first step that fails.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_test.cmake needs -D${var}=...")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run_step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
if(EXISTS ${prefix}/include/common OR EXISTS ${prefix}/include/runtime)
  message(FATAL_ERROR "internal headers were installed under ${prefix}/include")
endif()

foreach(project consumer finetune_service)
  if(project STREQUAL consumer)
    set(src ${SOURCE_DIR}/tests/api/consumer)
  else()
    set(src ${SOURCE_DIR}/examples/finetune_service)
  endif()
  run_step("configure ${project}" ${CMAKE_COMMAND} -S ${src} -B ${WORK_DIR}/${project} -G ${GENERATOR}
           -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix}
           -DCMAKE_CXX_FLAGS=-Werror)
  run_step("build ${project}" ${CMAKE_COMMAND} --build ${WORK_DIR}/${project})
endforeach()

run_step("run consumer" ${WORK_DIR}/consumer/consumer ${SOURCE_DIR}/models/mlp.onnx ${WORK_DIR})
file(REMOVE_RECURSE ${prefix})
