# package.cmake -- the Debian package, delay-bridge_VERSION_amd64.deb, made by
# CPack's DEB generator (included from the top CMakeLists.txt):
#
#   cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DDB_INTEGRATION=OFF
#   cmake --build build-deb -j --target delay-bridge
#   (cd build-deb && cpack -G DEB)          # -> build-deb/delay-bridge_0.1.0_amd64.deb
#
# What it installs:
#   /usr/bin/delay-bridge
#   /usr/lib/systemd/system/delay-bridge.service  deploy/delay-bridge.service with
#        the binary in /usr/bin and the package's system user instead of DynamicUser
#   /etc/delay-bridge/config.json                 deploy/config.example.json (a conffile)
#   /usr/bin/delay-bridge-build-shim, /usr/share/delay-bridge/plugin/
#                                                 the x-delayed-message shim: deploy/plugin/install.cmake
#   /usr/bin/delay-bridge-migrate-plugin, /usr/share/delay-bridge/migrate/
#                                                 deploy/plugin/migrate/install.cmake
#   /usr/share/doc/delay-bridge/                  README.md, the example configs,
#        deploy/monitoring/ (Prometheus rules, Grafana dashboard)
#   /usr/share/man/man8/delay-bridge.8.gz, /usr/share/man/man5/delay-bridge.json.5.gz
#                                                 deploy/man/, gzip -9n (no trigger needed:
#                                                 man finds them by path)
# and its maintainer scripts (deploy/debian/postinst, prerm, postrm) add the
# system user "delay-bridge" and /var/lib/delay-bridge (0700, the WAL).
# Tested in a clean Debian 12 container: tests/container/test_deb.sh.

# The packaged unit: the same hardening; only the path and the identity change.
file(READ ${CMAKE_SOURCE_DIR}/deploy/delay-bridge.service db_unit)
string(REPLACE "/usr/local/bin/delay-bridge" "/usr/bin/delay-bridge" db_unit "${db_unit}")
string(REPLACE "\nDynamicUser=yes\n" "\n# The package's system user (postinst), owner of /var/lib/delay-bridge.
User=delay-bridge
Group=delay-bridge\n" db_unit "${db_unit}")
string(REPLACE "With
# DynamicUser=yes it really lives in /var/lib/private/delay-bridge, owned by
# a user allocated at each start (same uid for the same unit name), and
# survives restarts and upgrades; `systemctl clean --what=state` erases it." "It is
# owned by the system user delay-bridge (made by the package's postinst) and
# survives restarts, upgrades and even a purge of the package (a WAL holds
# messages not yet delivered)." db_unit "${db_unit}")
string(REGEX REPLACE "# Install:\n(#   [^\n]*\n)+#\n" "" db_unit "${db_unit}")
string(REPLACE "# delay-bridge.service -- systemd unit for delay-bridge.\n"
       "# delay-bridge.service -- systemd unit for delay-bridge, as installed by the Debian
# package (generated from deploy/delay-bridge.service by deploy/debian/package.cmake).
# First edit /etc/delay-bridge/config.json, then: systemctl enable --now delay-bridge\n"
       db_unit "${db_unit}")
file(WRITE ${CMAKE_BINARY_DIR}/deb/delay-bridge.service "${db_unit}")

install(FILES ${CMAKE_BINARY_DIR}/deb/delay-bridge.service DESTINATION lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/config.example.json DESTINATION /etc/delay-bridge
        RENAME config.json PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION share/doc/delay-bridge)

# The man pages, gzipped as Debian policy wants them (-n: no name or time in
# the header, so the same page makes the same bytes), with the project's
# version in their .TH line. Made when cmake configures; an edited page
# configures again (CMAKE_CONFIGURE_DEPENDS). tests/deploy/test_manpages.py
# checks the pages, tests/container/test_deb.sh that man finds them.
find_program(DB_GZIP gzip)
foreach(db_man delay-bridge.8 delay-bridge.json.5)
  set(db_man_src ${CMAKE_SOURCE_DIR}/deploy/man/${db_man})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${db_man_src})
  if(NOT DB_GZIP)
    message(WARNING "gzip not found: the package will lack the man page ${db_man}")
    continue()
  endif()
  file(READ ${db_man_src} db_page)
  # the .TH line's footer, "delay-bridge 0.1.0": the only such string in a page
  string(REGEX REPLACE [["delay-bridge [0-9]+\.[0-9]+\.[0-9]+"]] "\"delay-bridge ${PROJECT_VERSION}\""
         db_page "${db_page}")
  file(WRITE ${CMAKE_BINARY_DIR}/deb/man/${db_man} "${db_page}")
  execute_process(COMMAND ${DB_GZIP} -9nf ${CMAKE_BINARY_DIR}/deb/man/${db_man}
                  RESULT_VARIABLE db_rc)
  if(NOT db_rc EQUAL 0)
    message(FATAL_ERROR "gzip -9n ${db_man}: ${db_rc}")
  endif()
  string(REGEX MATCH "[0-9]$" db_section ${db_man})
  install(FILES ${CMAKE_BINARY_DIR}/deb/man/${db_man}.gz DESTINATION share/man/man${db_section})
endforeach()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/examples ${CMAKE_SOURCE_DIR}/deploy/monitoring
        DESTINATION share/doc/delay-bridge)
include(${CMAKE_SOURCE_DIR}/deploy/plugin/install.cmake)
include(${CMAKE_SOURCE_DIR}/deploy/plugin/migrate/install.cmake)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME delay-bridge)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "delay-bridge maintainers <delay-bridge@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "delayed messages for RabbitMQ, without the delayed-message plugin")
set(CPACK_PACKAGE_DESCRIPTION "delay-bridge consumes an ingress queue, writes each message to its own
write-ahead log, holds it in a timing wheel and republishes it to its
target exchange when it falls due, with publisher confirms.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)              # delay-bridge_VERSION_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)               # librabbitmq4, libev4, libjson-c5, libmicrohttpd12
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "rabbitmq-server, prometheus")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/debian/postinst
    ${CMAKE_SOURCE_DIR}/deploy/debian/prerm
    ${CMAKE_SOURCE_DIR}/deploy/debian/postrm
    ${CMAKE_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
# conffiles: /etc/delay-bridge/config.json, so an upgrade keeps local edits.
set(CPACK_STRIP_FILES ON)
include(CPack)
