# `cmake --install` installs the client libraries for other CMake projects
# (find_package(failoverd CONFIG): failoverd::client, failoverd::client_local)
# and for everything else through pkg-config (failoverd-client.pc). The server
# and failoverctl are not installed here: they are deployed as a container or
# run from the build (scripts/start).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FAILOVERD_INCLUDE_DIR "${CMAKE_INSTALL_INCLUDEDIR}/failoverd")
set(FAILOVERD_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/failoverd")

# What the two public libraries stand on, installed beside them (static
# libraries carry their dependencies to the final link).
set(FAILOVERD_EXPORTED failover_client failover_client_local failover_convert failover_model_proto failover_engine
  failover_common failover_proto)
set_target_properties(failover_client PROPERTIES EXPORT_NAME client)
set_target_properties(failover_client_local PROPERTIES EXPORT_NAME client_local)
foreach(lib failover_convert failover_model_proto failover_engine failover_common failover_proto)
  string(REPLACE "failover_" "" name "${lib}")
  set_target_properties(${lib} PROPERTIES EXPORT_NAME "${name}")
endforeach()

install(TARGETS ${FAILOVERD_EXPORTED} EXPORT failoverdTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(EXPORT failoverdTargets NAMESPACE failoverd:: DESTINATION "${FAILOVERD_CMAKE_DIR}")

# The headers a caller includes: the client's and the generated failover.v1 API.
install(FILES client/attempt_pool.h client/client.h client/connection.h client/local_decisions.h
  client/probe_agent.h client/upstream_failure.h DESTINATION "${FAILOVERD_INCLUDE_DIR}/client")
get_target_property(FAILOVERD_PROTO_BINARY_DIR failover_proto BINARY_DIR)
install(DIRECTORY "${FAILOVERD_PROTO_BINARY_DIR}/gen/failover" DESTINATION "${FAILOVERD_INCLUDE_DIR}"
  FILES_MATCHING PATTERN "*.pb.h" PATTERN "*_mock.grpc.pb.h" EXCLUDE)
install(FILES proto/failover/v1/types.proto proto/failover/v1/decision.proto proto/failover/v1/admin.proto
  DESTINATION "${CMAKE_INSTALL_DATADIR}/failoverd/proto/failover/v1")

configure_package_config_file(cmake/failoverdConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/failoverdConfig.cmake"
  INSTALL_DESTINATION "${FAILOVERD_CMAKE_DIR}")
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/failoverdConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/failoverdConfig.cmake" "${CMAKE_CURRENT_BINARY_DIR}/failoverdConfigVersion.cmake"
  DESTINATION "${FAILOVERD_CMAKE_DIR}")

configure_file(cmake/failoverd-client.pc.in "${CMAKE_CURRENT_BINARY_DIR}/failoverd-client.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/failoverd-client.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
