# install.cmake - what `cmake --install` puts under the prefix, and how
# other projects find it (included by the top-level CMakeLists.txt, after
# the library's targets exist):
#
#   lib/libfusec.so.0.x.y, libfusec.so.0.x (the SONAME), libfusec.so
#   lib/libfusec.a
#   include/fusec.h
#   bin/fusec, share/doc/fusec/ (the README and docs/)
#   share/man/man1/fusec.1        the manual page (fusec --help-man)
#   lib/pkgconfig/fusec.pc        the shared library; Libs.private lists
#                                 what the static one needs (--static)
#   lib/pkgconfig/fusec-static.pc the static library and its dependencies
#   lib/cmake/fusec/              find_package(fusec): fusec::fusec (shared)
#                                 and fusec::fusec_static
#
# add_subdirectory(fusec) gets the same two names as aliases.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The SONAME names the ABI. 0.x releases may change the ABI with the minor
# version, so a 0.x library's SONAME is libfusec.so.0.<minor> (a program
# linked with 0.2 never loads 0.3); from 1.0 on it is libfusec.so.<major>.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(FUSEC_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(FUSEC_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()
set_target_properties(fusec_shared PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${FUSEC_SOVERSION}
                                              EXPORT_NAME fusec)
set_target_properties(fusec_static PROPERTIES EXPORT_NAME fusec_static)
add_library(fusec::fusec ALIAS fusec_shared)
add_library(fusec::fusec_static ALIAS fusec_static)

# What linking the static library needs, as linker arguments, for
# pkg-config: the libraries found at configure time, by their paths.
set(FUSEC_PC_PRIVATE)
foreach(lib ${FUSEC_LINK_LIBS})
  if(lib STREQUAL "Threads::Threads")
    if(CMAKE_THREAD_LIBS_INIT)
      list(APPEND FUSEC_PC_PRIVATE ${CMAKE_THREAD_LIBS_INIT})
    else()
      list(APPEND FUSEC_PC_PRIVATE -lpthread)
    endif()
  elseif(TARGET ${lib})
    get_target_property(loc ${lib} IMPORTED_LOCATION)
    if(NOT loc)
      get_target_property(loc ${lib} IMPORTED_LOCATION_RELEASE)
    endif()
    if(loc)
      list(APPEND FUSEC_PC_PRIVATE ${loc})
    endif()
  elseif(IS_ABSOLUTE "${lib}")
    list(APPEND FUSEC_PC_PRIVATE ${lib})
  else()
    list(APPEND FUSEC_PC_PRIVATE -l${lib})
  endif()
endforeach()
list(REMOVE_DUPLICATES FUSEC_PC_PRIVATE)
list(JOIN FUSEC_PC_PRIVATE " " FUSEC_PC_LIBS_PRIVATE)
# The prefix as a path from the .pc file's folder, so that the files are
# right wherever `cmake --install --prefix` puts them.
file(RELATIVE_PATH FUSEC_PC_UP "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" FUSEC_PC_UP "${FUSEC_PC_UP}")
set(FUSEC_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
set(FUSEC_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
foreach(pc fusec fusec-static)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${PROJECT_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

install(TARGETS fusec_shared fusec_static EXPORT fusecTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/fusec.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS fusec RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} FILES_MATCHING PATTERN "*.md")

set(FUSEC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusec)
install(EXPORT fusecTargets NAMESPACE fusec:: DESTINATION ${FUSEC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fusecConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fusecConfig.cmake INSTALL_DESTINATION ${FUSEC_CMAKE_DIR})
# 0.x: a minor version may break what the one before it offered.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fusecConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fusecConfig.cmake ${PROJECT_BINARY_DIR}/fusecConfigVersion.cmake
  DESTINATION ${FUSEC_CMAKE_DIR})

# The manual page, made by the CLI from the table its --help prints
# (fusec --help-man; an empty environment, so that no value set on the
# build machine lands in the page).
add_custom_command(OUTPUT ${PROJECT_BINARY_DIR}/fusec.1
  COMMAND env -i $<TARGET_FILE:fusec> --help-man > ${PROJECT_BINARY_DIR}/fusec.1
  DEPENDS fusec VERBATIM)
add_custom_target(fusec_man ALL DEPENDS ${PROJECT_BINARY_DIR}/fusec.1)
install(FILES ${PROJECT_BINARY_DIR}/fusec.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
