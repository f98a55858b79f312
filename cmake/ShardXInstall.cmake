# Where ShardX installs, and what. Two layouts, chosen at configure time:
#
#  - a prefix (`cmake --install build --prefix P`, the default): headers in
#    P/include/shardx (with the generated .h.inc), every library under lib/
#    in P/lib, the tools in P/bin, and P/lib/cmake/ShardX/ShardXConfig.cmake
#    with the exported targets ShardX::<library> (docs/Install.md);
#  - the Python wheel (SHARDX_PYTHON_PACKAGE, set by pyproject.toml for
#    scikit-build-core): component shardx-python holds the binding in
#    shardx/, the tools in shardx/_bin and the runtime archives that
#    shardx-compile links into artifacts in shardx/_lib.
#
# Every library defined under lib/ is installed and exported: a library added
# there needs no install line of its own. Tools are listed in SHARDX_TOOLS,
# the archives an artifact links in SHARDX_RUNTIME_ARCHIVES (the list
# lib/Compiler's runtimeLibraries() reads).
#
# Included before the subdirectories (they read SHARDX_INSTALL_* and
# SHARDX_INSTALLED_ARCHIVE_DIR); shardx_install() runs after them.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(SHARDX_PYTHON_PACKAGE
  "Install the Python wheel's layout (shardx/, shardx/_bin, shardx/_lib) instead of a prefix's"
  OFF)

if(SHARDX_PYTHON_PACKAGE)
  set(SHARDX_INSTALL_BINDIR shardx/_bin)
  set(SHARDX_INSTALL_LIBDIR shardx/_lib)
  set(SHARDX_INSTALL_PYDIR shardx)
else()
  set(SHARDX_INSTALL_BINDIR ${CMAKE_INSTALL_BINDIR})
  set(SHARDX_INSTALL_LIBDIR ${CMAKE_INSTALL_LIBDIR})
endif()
set(SHARDX_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ShardX CACHE STRING
  "Where ShardXConfig.cmake is installed, relative to the prefix")

# Where an installed tool finds the runtime archives, relative to its own
# folder (lib/Compiler compiles it in): "../lib" in a prefix, "../_lib" in
# the wheel.
file(RELATIVE_PATH SHARDX_INSTALLED_ARCHIVE_DIR
  "/prefix/${SHARDX_INSTALL_BINDIR}" "/prefix/${SHARDX_INSTALL_LIBDIR}")

set(SHARDX_TOOLS shardx-opt shardx-compile shardx-exec shardx-run
  shardx-gpu-exec)
set(SHARDX_RUNTIME_ARCHIVES ShardXLayout ShardXRuntime ShardXRuntimeBlas
  ShardXRuntimeCuda ShardXRuntimeCudaCode)

# The library targets defined in `dir` and below.
function(_shardx_libraries_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  set(libs)
  foreach(t IN LISTS targets)
    get_target_property(type ${t} TYPE)
    if(type MATCHES "^(STATIC|SHARED)_LIBRARY$" AND NOT t MATCHES "^obj\\.")
      list(APPEND libs ${t})
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _shardx_libraries_under(${sub} more)
    list(APPEND libs ${more})
  endforeach()
  set(${out} ${libs} PARENT_SCOPE)
endfunction()

# The installed tools find libMLIR.so and libLLVM.so where the build found
# them (LLVM's install RPATH is only $ORIGIN/../lib, a prefix of LLVM's own).
function(_shardx_tool_rpath)
  foreach(t IN LISTS SHARDX_TOOLS)
    if(TARGET ${t})
      set_property(TARGET ${t} APPEND PROPERTY INSTALL_RPATH
        "${LLVM_LIBRARY_DIR}")
    endif()
  endforeach()
endfunction()

# The Python wheel: the binding, the tools and the runtime archives.
function(_shardx_install_python_package)
  set(component COMPONENT shardx-python)
  if(TARGET _shardx_rt)
    install(TARGETS _shardx_rt LIBRARY DESTINATION ${SHARDX_INSTALL_PYDIR}
      ${component})
  endif()
  foreach(t IN LISTS SHARDX_TOOLS)
    if(TARGET ${t})
      install(TARGETS ${t} RUNTIME DESTINATION ${SHARDX_INSTALL_BINDIR}
        ${component})
    endif()
  endforeach()
  foreach(t IN LISTS SHARDX_RUNTIME_ARCHIVES)
    if(TARGET ${t})
      install(TARGETS ${t} ARCHIVE DESTINATION ${SHARDX_INSTALL_LIBDIR}
        ${component})
    endif()
  endforeach()
  # What `pip install .` builds (pyproject.toml's build.targets).
  set(deps)
  foreach(t IN LISTS SHARDX_TOOLS SHARDX_RUNTIME_ARCHIVES ITEMS _shardx_rt)
    if(TARGET ${t})
      list(APPEND deps ${t})
    endif()
  endforeach()
  add_custom_target(shardx-python-package DEPENDS ${deps})
endfunction()

# A prefix: headers, libraries, tools, the CMake package.
function(_shardx_install_prefix)
  _shardx_libraries_under(${PROJECT_SOURCE_DIR}/lib libraries)
  set(tools)
  foreach(t IN LISTS SHARDX_TOOLS)
    if(TARGET ${t})
      list(APPEND tools ${t})
    endif()
  endforeach()
  install(TARGETS ${libraries} ${tools}
    EXPORT ShardXTargets
    ARCHIVE DESTINATION ${SHARDX_INSTALL_LIBDIR} COMPONENT shardx-dev
    LIBRARY DESTINATION ${SHARDX_INSTALL_LIBDIR} COMPONENT shardx-dev
    RUNTIME DESTINATION ${SHARDX_INSTALL_BINDIR} COMPONENT shardx-dev
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/shardx
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT shardx-dev
    FILES_MATCHING PATTERN "*.h" PATTERN "*.td")
  install(DIRECTORY ${PROJECT_BINARY_DIR}/include/shardx
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT shardx-dev
    FILES_MATCHING PATTERN "*.h.inc" PATTERN "CMakeFiles" EXCLUDE)
  install(EXPORT ShardXTargets NAMESPACE ShardX::
    DESTINATION ${SHARDX_INSTALL_CMAKEDIR} COMPONENT shardx-dev)

  set(SHARDX_EXPORTED_LIBRARIES ${libraries})
  configure_package_config_file(
    ${PROJECT_SOURCE_DIR}/cmake/ShardXConfig.cmake.in
    ${PROJECT_BINARY_DIR}/cmake/ShardXConfig.cmake
    INSTALL_DESTINATION ${SHARDX_INSTALL_CMAKEDIR}
    PATH_VARS CMAKE_INSTALL_INCLUDEDIR SHARDX_INSTALL_BINDIR
      SHARDX_INSTALL_LIBDIR)
  write_basic_package_version_file(
    ${PROJECT_BINARY_DIR}/cmake/ShardXConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/cmake/ShardXConfig.cmake
    ${PROJECT_BINARY_DIR}/cmake/ShardXConfigVersion.cmake
    DESTINATION ${SHARDX_INSTALL_CMAKEDIR} COMPONENT shardx-dev)
endfunction()

function(shardx_install)
  _shardx_tool_rpath()
  if(SHARDX_PYTHON_PACKAGE)
    _shardx_install_python_package()
  else()
    _shardx_install_prefix()
  endif()
endfunction()
