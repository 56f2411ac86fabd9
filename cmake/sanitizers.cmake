# Sanitizer and fuzzing builds (Note [Fuzzing and sanitizers] in docs/ARCHITECTURE.md).
# OMT_SANITIZE=ON: ASan + UBSan on everything (CUDA off), for the unit tests in CI
# (scripts/test-sanitize.sh). OMT_FUZZ=ON (clang only): the same plus libFuzzer's coverage
# instrumentation, and tests/fuzz builds libFuzzer binaries instead of corpus replays.
option(OMT_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(OMT_FUZZ "Build the libFuzzer targets in tests/fuzz (clang; implies OMT_SANITIZE)" OFF)

if(OMT_FUZZ AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "OMT_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
endif()
if(OMT_SANITIZE OR OMT_FUZZ)
  if(OMT_WITH_CUDA)
    message(FATAL_ERROR "OMT_SANITIZE/OMT_FUZZ builds are CPU only: add -DOMT_WITH_CUDA=OFF")
  endif()
  # Every UBSan finding stops the program, as ASan's do (halt_on_error=1 in its options).
  set(omt_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=all
      -fno-omit-frame-pointer -g1)
  if(OMT_FUZZ)
    list(APPEND omt_sanitize_flags -fsanitize=fuzzer-no-link)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${omt_sanitize_flags}>")
  add_link_options(-fsanitize=address,undefined)
endif()
