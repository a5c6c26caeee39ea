# check_layers.cmake -- every include in src/ points down (run by ctest as "layers").
#
#   cmake -DROOT=<repo> -P check_layers.cmake
#
# src/README.md draws the layers; this is the same table, checked. A file of
# src/FOLDER/ may include a header of its own folder ("name.h"), of a folder
# on a lower floor ("folder/name.h"), or a public header
# ("delay-bridge/name.h") whose code lives on a lower floor or in its own
# folder: never one of its own floor or above. A public header belongs to
# the folder that holds its .c (include/delay-bridge/wal.h -> src/wal/wal.c);
# the few whose code is spread are named in DB_PUBLIC_HOME below.
#
# What two files on one floor share goes one floor down; so does what a
# split file would call back for. Calls follow includes here (no file
# declares another's functions itself; -Wmissing-prototypes would not help
# for that, so the table is the rule and review keeps it).
cmake_policy(SET CMP0057 NEW)

set(DB_FLOORS
  "base:1" "wal:2" "config:3" "engine:3" "message:4" "status:5"
  "broker:6" "repl:7" "daemon:8" "cli:8" "main:9")
# Public headers named otherwise than their code's file.
set(DB_PUBLIC_HOME "stats.h:base" "wlog.h:wal" "walrec.h:wal" "consumer.h:broker"
    "publisher.h:broker" "api.h:status" "strbuf.h:base" "walreplay.h:wal")

# The value of key in a list of "key:value" entries, or "".
function(lookup table key out)
  foreach(e ${${table}})
    string(REPLACE ":" ";" kv ${e})
    list(GET kv 0 k)
    if(k STREQUAL key)
      list(GET kv 1 v)
      set(${out} ${v} PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

function(floor_of dir out)
  lookup(DB_FLOORS ${dir} v)
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

# The folder of a public header: DB_PUBLIC_HOME, else the folder of its .c.
function(home_of header out)
  lookup(DB_PUBLIC_HOME ${header} v)
  if(v STREQUAL "")
    string(REGEX REPLACE "\\.h$" ".c" c ${header})
    file(GLOB hits RELATIVE ${ROOT}/src ${ROOT}/src/*/${c})
    if(hits)
      list(GET hits 0 h)
      get_filename_component(v ${h} DIRECTORY)
    endif()
  endif()
  set(${out} "${v}" PARENT_SCOPE)
endfunction()

file(GLOB files RELATIVE ${ROOT}/src ${ROOT}/src/*/*.c ${ROOT}/src/*/*.h ${ROOT}/src/main.c)
set(bad "")
set(n 0)
foreach(f ${files})
  get_filename_component(dir ${f} DIRECTORY)
  if(dir STREQUAL "")
    set(dir main)
  endif()
  floor_of(${dir} mine)
  if(mine STREQUAL "")
    list(APPEND bad "src/${f}: folder '${dir}' has no floor in check_layers.cmake and src/README.md")
    continue()
  endif()
  math(EXPR n "${n} + 1")
  file(STRINGS ${ROOT}/src/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line ${lines})
    string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
    set(inc ${CMAKE_MATCH_1})
    set(to "")
    if(inc MATCHES "^delay-bridge/(.+)$")
      home_of(${CMAKE_MATCH_1} to)
      if(to STREQUAL "")
        list(APPEND bad "src/${f}: ${inc} has no home folder (add it to DB_PUBLIC_HOME)")
        continue()
      endif()
    elseif(inc MATCHES "^([a-z]+)/[^/]+$")
      set(to ${CMAKE_MATCH_1})
    else()
      continue() # a header of its own folder
    endif()
    if(to STREQUAL dir)
      continue()
    endif()
    floor_of(${to} theirs)
    if(theirs STREQUAL "" OR NOT theirs LESS mine)
      list(APPEND bad "src/${f} (${dir}, floor ${mine}) includes ${inc} (${to}, floor ${theirs})")
    endif()
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " text "${bad}")
  message(FATAL_ERROR "includes that do not point down (src/README.md):\n  ${text}")
endif()
message(STATUS "layers: ${n} files of src/ checked, every include points down")
