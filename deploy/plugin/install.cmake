# The shim (deploy/plugin/README.md) in the Debian package (included by
# deploy/debian/package.cmake). It is built on the broker's host, against that
# broker's own include files and Erlang, so the package ships its source and
# the build script, not a .beam:
#   /usr/bin/delay-bridge-build-shim        runs the script below:
#        delay-bridge-build-shim --install local && rabbitmq-plugins enable rabbitmq_delay_bridge_exchange
#   /usr/share/delay-bridge/plugin/         build.sh, src/, test/, VERSION
file(WRITE ${CMAKE_BINARY_DIR}/deb/delay-bridge-build-shim
     "#!/bin/sh\n# delay-bridge-build-shim -- build (and with --install, install) the x-delayed-message\n"
     "# shim for the RabbitMQ on this host: /usr/share/delay-bridge/plugin/README.md\n"
     "exec /usr/share/delay-bridge/plugin/build.sh \"$@\"\n")
file(WRITE ${CMAKE_BINARY_DIR}/deb/plugin-VERSION "${PROJECT_VERSION}\n")
install(PROGRAMS ${CMAKE_BINARY_DIR}/deb/delay-bridge-build-shim DESTINATION bin)
install(PROGRAMS ${CMAKE_SOURCE_DIR}/deploy/plugin/build.sh DESTINATION share/delay-bridge/plugin)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/plugin/README.md DESTINATION share/delay-bridge/plugin)
install(FILES ${CMAKE_BINARY_DIR}/deb/plugin-VERSION DESTINATION share/delay-bridge/plugin
        RENAME VERSION)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/deploy/plugin/src ${CMAKE_SOURCE_DIR}/deploy/plugin/test
        DESTINATION share/delay-bridge/plugin)
