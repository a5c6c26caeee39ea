# libFuzzer harnesses (README.md here). Only with -DDB_FUZZ=ON and clang:
#   CC=clang cmake -S . -B build-fuzz -DDB_FUZZ=ON && cmake --build build-fuzz -j2
# Each harness compiles the project sources it exercises itself, with the
# fuzzer's coverage instrumentation and ASan/UBSan, and links dbcore for the
# rest, so the normal libraries keep their usual flags. ctest -L fuzz replays the seed
# corpus and fuzzes each target briefly; tests/fuzz/run.sh fuzzes for long.
option(DB_FUZZ "Build the libFuzzer harnesses in tests/fuzz (needs clang)" OFF)
if(DB_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "DB_FUZZ=ON needs clang (libFuzzer): CC=clang cmake -S . -B build-fuzz -DDB_FUZZ=ON")
  endif()
  set(DB_FUZZ_SECONDS 15 CACHE STRING "How long each ctest fuzz test fuzzes after replaying its seeds")
  set(FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
  set(FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
                 -fno-omit-frame-pointer -g)

  # name -> the project sources it exercises (compiled with the fuzzer flags)
  set(FUZZ_SRC_fuzz_walrec src/wal/walrec.c src/base/crc32c.c)
  set(FUZZ_SRC_fuzz_props_roundtrip src/broker/broker_msg.c src/message/xdelay.c src/wal/walrec.c src/base/crc32c.c)
  set(FUZZ_SRC_fuzz_config src/config/config.c src/config/config_routes.c
                           src/config/config_template.c src/config/uri.c)
  set(FUZZ_SRC_fuzz_routes src/config/config.c src/config/config_routes.c
                           src/config/config_template.c src/config/config_store.c
                           src/config/config_json.c src/config/config_check.c
                           src/config/config_retry.c src/config/uri.c)
  set(FUZZ_SRC_fuzz_xdelay src/message/xdelay.c)
  set(FUZZ_SRC_fuzz_uri src/config/uri.c)
  set(FUZZ_SRC_fuzz_replrec src/wal/replrec.c src/wal/walrec.c src/base/crc32c.c)
  set(FUZZ_SRC_fuzz_retry src/broker/broker_retry.c src/broker/broker_msg.c src/message/retry.c)
  set(FUZZ_TARGETS fuzz_walrec fuzz_props_roundtrip fuzz_config fuzz_xdelay fuzz_uri fuzz_replrec
                   fuzz_retry fuzz_routes)

  foreach(name ${FUZZ_TARGETS})
    set(srcs ${FUZZ_DIR}/${name}.c)
    foreach(s ${FUZZ_SRC_${name}})
      list(APPEND srcs ${CMAKE_SOURCE_DIR}/${s})
    endforeach()
    add_executable(${name} ${srcs})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/include)
    target_compile_options(${name} PRIVATE ${FUZZ_FLAGS})
    target_link_options(${name} PRIVATE ${FUZZ_FLAGS})
    # Whatever else the module calls comes from the ordinary dbcore library
    # (not instrumented, which ASan allows): the objects compiled above
    # take precedence, so only the other modules are pulled from it.
    target_link_libraries(${name} PRIVATE dbcore m)

    # Seeds are replayed read-only; what the fuzzer finds goes to the build
    # tree (the first corpus directory), never into the repository.
    set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-ctest/${name})
    file(MAKE_DIRECTORY ${work}/corpus ${work}/artifacts)
    set(dict)
    if(EXISTS ${FUZZ_DIR}/${name}.dict)
      set(dict -dict=${FUZZ_DIR}/${name}.dict)
    endif()
    add_test(NAME fuzz.${name}
             COMMAND ${name} -max_total_time=${DB_FUZZ_SECONDS} -timeout=10 -rss_limit_mb=2048
                     -print_final_stats=1 ${dict} -artifact_prefix=${work}/artifacts/
                     ${work}/corpus ${FUZZ_DIR}/corpus/${name})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 300)
  endforeach()
  target_link_libraries(fuzz_props_roundtrip PRIVATE PkgConfig::RABBITMQ)
  target_link_libraries(fuzz_retry PRIVATE PkgConfig::RABBITMQ)
endif()
