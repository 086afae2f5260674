# The Python package `tfm` (python/tfm/*.py + the pybind11 extension tfm._tfm), staged in build/python/tfm so that
# PYTHONPATH=build/python imports the build tree; `make install` puts the same folder into Python's dist-packages.
file(GLOB TFM_PYTHON_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/src/*.cpp)
pybind11_add_module(tfm_python MODULE NO_EXTRAS ${TFM_PYTHON_SOURCES})
target_link_libraries(tfm_python PRIVATE tfm_lib)
set_target_properties(tfm_python PROPERTIES OUTPUT_NAME _tfm LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python/tfm)

file(GLOB TFM_PYTHON_FILES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/tfm/*.py)
set(_staged "")
foreach(f ${TFM_PYTHON_FILES})
  get_filename_component(n ${f} NAME)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/python/tfm/${n} DEPENDS ${f}
                     COMMAND ${CMAKE_COMMAND} -E copy ${f} ${CMAKE_BINARY_DIR}/python/tfm/${n})
  list(APPEND _staged ${CMAKE_BINARY_DIR}/python/tfm/${n})
endforeach()
add_custom_target(tfm_python_files ALL DEPENDS ${_staged})
add_dependencies(tfm_python tfm_python_files)

foreach(_mod numpy pytest)
  execute_process(COMMAND ${Python_EXECUTABLE} -c "import ${_mod}" RESULT_VARIABLE _missing OUTPUT_QUIET ERROR_QUIET)
  if(_missing)
    message(WARNING "${Python_EXECUTABLE} cannot import ${_mod} (Debian python3-${_mod}; scripts/install-deps.sh): "
                    "the tfm module needs numpy, its tests pytest")
  endif()
endforeach()

# Debian's interpreter searches /usr/local/lib/python3.X/dist-packages and /usr/lib/python3/dist-packages.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_py_dir lib/python3/dist-packages)
else()
  set(_py_dir lib/python${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}/dist-packages)
endif()
set(TFM_PYTHON_INSTALL_DIR ${_py_dir} CACHE STRING "Where `make install` puts the tfm package (relative to the prefix)")
install(TARGETS tfm_python LIBRARY DESTINATION ${TFM_PYTHON_INSTALL_DIR}/tfm COMPONENT python)
install(FILES ${TFM_PYTHON_FILES} DESTINATION ${TFM_PYTHON_INSTALL_DIR}/tfm COMPONENT python)

# The pytest suite against the build tree's module.
add_test(NAME python_tests
         COMMAND ${Python_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python/tests
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(python_tests PROPERTIES TIMEOUT 900 ENVIRONMENT
                     "PYTHONPATH=${CMAKE_BINARY_DIR}/python;TFM_BINARY=$<TARGET_FILE:tfm>;OMP_NUM_THREADS=2;PYTHONDONTWRITEBYTECODE=1")

# pyproject.toml: `pip install --no-build-isolation .` and `python3 -m build --wheel --no-isolation` into fresh
# virtual environments, both building through this build folder (its tfm_python target, already up to date).
add_test(NAME python_install
         COMMAND ${Python_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_python_install.py
         WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
set_tests_properties(python_install PROPERTIES TIMEOUT 900 ENVIRONMENT
                     "TFM_BUILD_DIR=${CMAKE_BINARY_DIR};PYTHONDONTWRITEBYTECODE=1;CMAKE_BUILD_PARALLEL_LEVEL=2")
