# check_purity.cmake -- pure modules stay pure (run by ctest as "purity").
#
#   cmake -DROOT=<repo> -DSOURCES="src/a.c;src/b.c" -P check_purity.cmake
#
# A pure module (the wheel, the WAL, the record codec, config, x-delay,
# metrics rendering, ...) must build and be testable without a broker or an
# event loop. This fails if one of SOURCES, or a project header it includes
# (followed transitively through "delay-bridge/..." includes), includes a
# rabbitmq-c header (<amqp*.h>) or libev (<ev.h>). "name.h" without a
# directory is a header beside its code (src/: pool.h, walreplay.h, ...) and
# is looked up in the including file's own directory; "folder/name.h" is a
# header of another folder of src/ (base/pool.h, wal/walreplay.h, ...). The pure library also
# links neither (see CMakeLists.txt), so a call would fail to link as well.
cmake_policy(SET CMP0057 NEW)
set(bad "")
set(seen "")
set(queue ${SOURCES})
while(queue)
  list(POP_FRONT queue f)
  if(f IN_LIST seen)
    continue()
  endif()
  list(APPEND seen ${f})
  if(NOT EXISTS ${ROOT}/${f})
    continue()
  endif()
  file(STRINGS ${ROOT}/${f} lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${lines})
    if(line MATCHES "<(amqp[a-z_]*\\.h|ev\\.h|rabbitmq-c/[^>]*)>")
      list(APPEND bad "${f}: ${line}")
    elseif(line MATCHES "\"(delay-bridge/[^\"]+)\"")
      list(APPEND queue include/${CMAKE_MATCH_1})
    elseif(line MATCHES "\"([a-z]+/[^\"/]+\\.h)\"")
      list(APPEND queue src/${CMAKE_MATCH_1})
    elseif(line MATCHES "\"([^\"/]+\\.h)\"")
      get_filename_component(d ${f} DIRECTORY)
      list(APPEND queue ${d}/${CMAKE_MATCH_1})
    endif()
  endforeach()
endwhile()
list(LENGTH seen n)
if(bad)
  string(REPLACE ";" "\n  " text "${bad}")
  message(FATAL_ERROR "pure modules must not include rabbitmq-c or libev:\n  ${text}")
endif()
message(STATUS "purity: ${n} pure files checked, none includes <amqp.h> or <ev.h>")
