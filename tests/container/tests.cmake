# Container test (included from tests/CMakeLists.txt): builds the docker/
# images with root podman and runs them; see test_container.sh for what it
# proves. One ctest test, label "container", skipped (exit 77) when not root,
# without podman, or where containers cannot run.
#
# Off unless asked for: it takes a minute or two, needs root and changes
# host settings (a cgroup mount, /etc/containers/containers.conf), so a plain
# `ctest` (tests/run.sh) must not run it by accident.
#
#   cmake -S . -B build -DDB_CONTAINER_TESTS=ON
#   ctest --test-dir build -L container --output-on-failure
#   bash tests/container/test_container.sh       # the same, without cmake

option(DB_CONTAINER_TESTS "Build the docker/ images with root podman and test them (ctest -L container)" OFF)
if(NOT DB_CONTAINER_TESTS)
  return()
endif()

find_program(DB_BASH bash REQUIRED)
add_test(NAME container.images
         COMMAND ${DB_BASH} ${CMAKE_CURRENT_LIST_DIR}/test_container.sh)
set_tests_properties(container.images PROPERTIES
  LABELS container
  SKIP_RETURN_CODE 77
  RESOURCE_LOCK podman
  COST 70
  TIMEOUT 900
  ENVIRONMENT "DB_CONTAINER_WORK=${CMAKE_BINARY_DIR}/container")

# The Debian package (deploy/debian/): cpack -G DEB, then installed in a clean
# Debian 12 container; see test_deb.sh.
add_test(NAME container.deb
         COMMAND ${DB_BASH} ${CMAKE_CURRENT_LIST_DIR}/test_deb.sh)
set_tests_properties(container.deb PROPERTIES
  LABELS container
  SKIP_RETURN_CODE 77
  RESOURCE_LOCK podman
  COST 40
  TIMEOUT 600
  ENVIRONMENT "DB_DEB_BUILD=${CMAKE_BINARY_DIR};DB_CONTAINER_WORK=${CMAKE_BINARY_DIR}/container-deb")
