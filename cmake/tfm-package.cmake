# transformer.cpp as a library: the public API (include/tfm, src/api), libtfm shared + static, the installed CMake
# package (find_package(tfm) -> tfm::tfm, tfm::tfm_static) and pkg-config file, the Python module `tfm`, and the
# tests that use them as a consumer would. Included at the end of CMakeLists.txt, after tfm_lib is defined.
include(GNUInstallDirs)
# The version lives in include/tfm/tfm.h (TFM_VERSION_MAJOR/MINOR/PATCH); everything else derives from it.
file(STRINGS include/tfm/tfm.h _tfm_version_lines REGEX "^#define TFM_VERSION_(MAJOR|MINOR|PATCH) ")
foreach(part MAJOR MINOR PATCH)
  string(REGEX REPLACE ".*#define TFM_VERSION_${part} ([0-9]+).*" "\\1" _tfm_${part} "${_tfm_version_lines}")
endforeach()
set(TFM_VERSION ${_tfm_MAJOR}.${_tfm_MINOR}.${_tfm_PATCH})
set(TFM_SOVERSION ${_tfm_MAJOR})

# tfm_lib (every src/*.cpp, src/api included) is also linked into libtfm.so and the Python module, so it is
# position-independent. -fno-semantic-interposition keeps GCC inlining across functions as in a non-PIC build.
set_target_properties(tfm_lib PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_options(tfm_lib PRIVATE -fno-semantic-interposition)
target_include_directories(tfm_lib PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)

# libtfm.so: the objects of tfm_lib as they are (no second compile), with tfm_lib's link dependencies.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/tfm_shared.cpp "// libtfm.so: every object comes from libtfm_lib.a\n")
add_library(tfm_shared SHARED ${CMAKE_CURRENT_BINARY_DIR}/tfm_shared.cpp)
target_link_libraries(tfm_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,tfm_lib>")
target_link_options(tfm_shared PRIVATE -Wl,--no-undefined)
# Only the public API (include/tfm) is exported: cmake/libtfm.map, checked by the shared_library_exports test.
target_link_options(tfm_shared PRIVATE -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/cmake/libtfm.map)
set_property(TARGET tfm_shared APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/cmake/libtfm.map)
add_test(NAME shared_library_exports
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/consumer/check_exports.sh $<TARGET_FILE:tfm_shared>)
set_target_properties(tfm_shared PROPERTIES OUTPUT_NAME tfm VERSION ${TFM_VERSION} SOVERSION ${TFM_SOVERSION})

install(DIRECTORY include/tfm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT tfm)
install(TARGETS tfm_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tfm)
install(FILES $<TARGET_FILE:tfm_lib> DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libtfm.a COMPONENT tfm)
include(CMakePackageConfigHelpers)
configure_package_config_file(cmake/tfmConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/tfmConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tfm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tfmConfigVersion.cmake VERSION ${TFM_VERSION}
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tfmConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/tfmConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tfm COMPONENT tfm)
file(RELATIVE_PATH TFM_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)  # relocatable: ${pcfiledir}/../..
string(REGEX REPLACE "/$" "" TFM_PC_TO_PREFIX "${TFM_PC_TO_PREFIX}")
configure_file(cmake/tfm.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tfm.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tfm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT tfm)
install(TARGETS tfm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tfm)

# A consumer's build: install into a temporary prefix, build examples/ with find_package(tfm) (shared and static)
# and with pkg-config, run them on the fixtures.
set(_tfm_consumer_flags "")
if(TFM_SANITIZE)  # an instrumented libtfm needs the sanitizer runtimes linked into the consumer
  set(_tfm_consumer_flags "-fsanitize=address,undefined")
endif()
add_test(NAME install_consumer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/consumer/run.sh ${CMAKE_BINARY_DIR}
                 ${CMAKE_CURRENT_SOURCE_DIR} "${_tfm_consumer_flags}")
set_tests_properties(install_consumer PROPERTIES TIMEOUT 600 ENVIRONMENT "OMP_NUM_THREADS=2")

# Python module `tfm` (pybind11) for Debian's /usr/bin/python3. Not built under the sanitizers: the interpreter
# is not instrumented, and ASan must be the first library loaded.
option(TFM_PYTHON "Build the Python module (pybind11)" ON)
if(TFM_PYTHON AND NOT TFM_SANITIZE)
  if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python_EXECUTABLE /usr/bin/python3)  # the python3 on PATH may be another interpreter without numpy
  endif()
  set(PYBIND11_FINDPYTHON ON)
  find_package(Python 3 COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG)
  if(Python_FOUND AND pybind11_FOUND)
    include(${CMAKE_CURRENT_LIST_DIR}/tfm-python.cmake)
  else()
    message(WARNING "Python module not built: needs pybind11-dev, python3-dev, python3-numpy (scripts/install-deps.sh)")
  endif()
endif()
