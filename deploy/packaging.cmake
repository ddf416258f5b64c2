# SPDX-License-Identifier: Apache-2.0
# Installing and packaging (included from the top-level CMakeLists.txt).
#
#   cmake --install build [--prefix /usr/local]   binaries, systemd unit, example config
#   cpack --config build/CPackConfig.cmake -G DEB  fp8d_<version>_<arch>.deb (prefix /usr)
#
# The unit and the config live where systemd and operators look: <prefix>/lib/systemd/system
# and /etc/fp8d (or <prefix>/etc/fp8d for any prefix other than /usr). The unit names
# /usr/bin and /etc; for another prefix those paths are rewritten at install time, which is
# why these rules are install(CODE) rather than install(FILES): CPack installs with its own
# prefix, known only then.
include(GNUInstallDirs)

set(FP8D_VERSION "0.1.0" CACHE STRING "fp8d version for packages")

install(TARGETS fp8d fp8ctl fp8-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES README.md docs/architecture.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(CODE "set(FP8D_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(FP8D_STAGING \"${CMAKE_BINARY_DIR}/deploy-staging\")
  set(FP8D_BINDIR_REL \"${CMAKE_INSTALL_BINDIR}\")")
install(CODE [[
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_etc "/etc")
  else()
    set(_etc "${CMAKE_INSTALL_PREFIX}/etc")
  endif()
  # The unit and its drop-ins, with the paths of this prefix; staged under their installed
  # names, so install_manifest.txt lists what really lands.
  foreach(_file fp8d.service remote.conf cluster.conf unprivileged.conf)
    file(READ "${FP8D_SOURCE_DIR}/deploy/systemd/${_file}" _text)
    string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_PREFIX}/${FP8D_BINDIR_REL}/" _text "${_text}")
    string(REPLACE "/usr/share/" "${CMAKE_INSTALL_PREFIX}/share/" _text "${_text}")
    string(REPLACE "/etc/" "${_etc}/" _text "${_text}")
    file(WRITE "${FP8D_STAGING}/unit/${_file}" "${_text}")
  endforeach()
  # Debian's doc files: changelog.Debian.gz (gzip -9n: no name or time stamp in it) and the
  # machine-readable copyright.
  file(MAKE_DIRECTORY "${FP8D_STAGING}/doc")
  execute_process(COMMAND gzip -9nc "${FP8D_SOURCE_DIR}/deploy/debian/changelog"
                  OUTPUT_FILE "${FP8D_STAGING}/doc/changelog.Debian.gz" RESULT_VARIABLE _gzip_rc)
  if(NOT _gzip_rc EQUAL 0)
    message(FATAL_ERROR "gzip deploy/debian/changelog failed: ${_gzip_rc}")
  endif()
  file(INSTALL "${FP8D_STAGING}/doc/changelog.Debian.gz" "${FP8D_SOURCE_DIR}/deploy/debian/copyright"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/share/doc/fp8d")
  configure_file("${FP8D_SOURCE_DIR}/deploy/debian/lintian-overrides" "${FP8D_STAGING}/lintian/fp8d" COPYONLY)
  file(INSTALL "${FP8D_STAGING}/lintian/fp8d" DESTINATION "${CMAKE_INSTALL_PREFIX}/share/lintian/overrides")
  configure_file("${FP8D_SOURCE_DIR}/deploy/systemd/fp8d.sysusers" "${FP8D_STAGING}/sysusers/fp8d.conf" COPYONLY)
  configure_file("${FP8D_SOURCE_DIR}/deploy/systemd/fp8d.env" "${FP8D_STAGING}/default/fp8d" COPYONLY)
  file(INSTALL "${FP8D_STAGING}/unit/fp8d.service"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system")
  file(INSTALL "${FP8D_STAGING}/unit/remote.conf" "${FP8D_STAGING}/unit/cluster.conf"
                 "${FP8D_STAGING}/unit/unprivileged.conf"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/share/fp8d/systemd")
  file(INSTALL "${FP8D_STAGING}/sysusers/fp8d.conf"
       DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/sysusers.d")
  file(INSTALL "${FP8D_SOURCE_DIR}/deploy/systemd/fp8d.yaml" DESTINATION "${_etc}/fp8d")
  file(INSTALL "${FP8D_STAGING}/default/fp8d" DESTINATION "${_etc}/default")
]])

# The Debian runtime packages of the binaries: one list, shared with the container image
# (deploy/container/Dockerfile) and checked against `ldd` by tests/deploy.
file(STRINGS ${PROJECT_SOURCE_DIR}/deploy/runtime-packages.txt _fp8d_runtime_pkgs REGEX "^[a-z0-9]")
string(JOIN ", " _fp8d_depends ${_fp8d_runtime_pkgs})

set(CPACK_PACKAGE_NAME fp8d)
set(CPACK_PACKAGE_VERSION ${FP8D_VERSION})
# Also the maintainer of deploy/debian/changelog's entries (lintian wants a real mail domain).
set(CPACK_PACKAGE_CONTACT "fp8d maintainers <fp8d-maintainers@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "FP8 training and calibration job controller (fp8d, fp8-worker, fp8ctl)")
# DESTDIR staging with the prefix /usr, so the install rules above see CMAKE_INSTALL_PREFIX=/usr
# (not a temporary path) whatever prefix the build was configured with.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_GENERATOR DEB)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Version <FP8D_VERSION>-1: a Debian revision, as deploy/debian/changelog's newest entry says
# (a version without one is a native package, whose changelog lintian wants elsewhere).
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
# The extended description (CPack puts CPACK_PACKAGE_DESCRIPTION_SUMMARY above it).
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "fp8d schedules FP8 training and calibration jobs on this machine's GPUs
(or a Slurm cluster), runs each as its owner through fp8-worker, and
re-adopts running workers when it restarts. fp8ctl is the client.
The package ships a hardened systemd unit, with drop-ins in
/usr/share/fp8d/systemd for a public address (remote.conf), the Slurm
launcher (cluster.conf) and an unprivileged daemon (unprivileged.conf).")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_STRIP_FILES ON)  # RelWithDebInfo binaries are ~100 MB with their debug info
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_fp8d_depends}")
# postinst: create the user, reload systemd, enable and start the unit where systemd runs.
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst
    ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm
    ${PROJECT_SOURCE_DIR}/deploy/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
