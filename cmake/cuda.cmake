# cuda.cmake -- detection and build of kiln's CUDA backend (src/backends/cuda/).
#
# Options
#   KILN_CUDA            AUTO (default) | ON | OFF. AUTO builds the backend when
#                        a CUDA compiler (nvcc) and cuBLASLt are found; ON makes
#                        their absence an error.
#   KILN_CUDNN           AUTO (default) | ON | OFF: convolutions through cuDNN
#                        (otherwise im2col + cuBLASLt and a direct kernel).
#   KILN_CUDNN_ROOT      extra prefix with include/cudnn.h and lib/libcudnn.so*
#                        (e.g. a Python venv's .../site-packages/nvidia/cudnn,
#                        whose lib/ may hold only libcudnn.so.9).
#   CMAKE_CUDA_ARCHITECTURES   default 90a (H100/H200); e.g. "80;90a".
#
# Outputs: KILN_CUDA_ENABLED (TRUE/FALSE), KILN_CUDNN_ENABLED. When enabled,
# the .cu files become the object library kiln_cuda_objs, linked into kiln and
# kiln_static with CUDA::cudart, CUDA::cublasLt (and cuDNN); the C sources of
# kiln_objs get KILN_HAVE_CUDA=1 / KILN_HAVE_CUDNN=0|1 and the CUDA include
# folders. The C files of src/backends/cuda compile to nothing otherwise.
#
# Include this file anywhere in the top-level CMakeLists.txt after project();
# when the kiln targets do not exist yet, the wiring is deferred to the end of
# the top-level directory (cmake_language(DEFER), CMake >= 3.19). It can also be
# injected without editing CMakeLists.txt:
#   cmake -DCMAKE_PROJECT_kiln_INCLUDE=<src>/cmake/cuda.cmake ...
include_guard(GLOBAL)

set(KILN_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE KILN_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KILN_CUDNN AUTO CACHE STRING "Use cuDNN for convolutions: AUTO, ON or OFF")
set_property(CACHE KILN_CUDNN PROPERTY STRINGS AUTO ON OFF)
set(KILN_CUDNN_ROOT "" CACHE PATH "Extra prefix with include/cudnn.h and lib/libcudnn.so*")

set(KILN_CUDA_ENABLED FALSE)
set(KILN_CUDNN_ENABLED FALSE)

function(_kiln_cuda_missing what)
  if(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON but ${what}")
  endif()
  message(STATUS "kiln: CUDA backend disabled: ${what} (KILN_CUDA=${KILN_CUDA})")
endfunction()

if(NOT KILN_CUDA STREQUAL "OFF")
  if(CMAKE_VERSION VERSION_LESS 3.19)
    _kiln_cuda_missing("CMake ${CMAKE_VERSION} is older than 3.19")
  else()
    # Look where the toolkit usually lives when nvcc is not on PATH.
    if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
      find_program(_kiln_nvcc nvcc)
      if(NOT _kiln_nvcc)
        set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
      endif()
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      _kiln_cuda_missing("no CUDA compiler (nvcc) was found")
    else()
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
        set(CMAKE_CUDA_ARCHITECTURES 90a CACHE STRING "CUDA architectures to build for" FORCE)
      endif()
      enable_language(CUDA)
      # libkiln and its users link as C programs (with CUDA::cudart); the
      # CUDA objects inside libkiln must not turn them into CUDA links.
      set(CMAKE_CUDA_LINKER_PREFERENCE_PROPAGATES FALSE)
      find_package(CUDAToolkit)
      if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::cudart)
        _kiln_cuda_missing("the CUDA toolkit (cudart) was not found")
      elseif(NOT TARGET CUDA::cublasLt)
        _kiln_cuda_missing("cuBLASLt was not found")
      else()
        set(KILN_CUDA_ENABLED TRUE)
      endif()
    endif()
  endif()
endif()

# ---- cuDNN (optional) --------------------------------------------------------
if(KILN_CUDA_ENABLED AND NOT KILN_CUDNN STREQUAL "OFF")
  set(_kiln_cudnn_hints)
  if(KILN_CUDNN_ROOT)
    list(APPEND _kiln_cudnn_hints ${KILN_CUDNN_ROOT})
  endif()
  list(APPEND _kiln_cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda /usr)
  find_path(KILN_CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${_kiln_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include include/x86_64-linux-gnu)
  # pip's nvidia-cudnn ships lib/libcudnn.so.9 without the unversioned link
  find_library(KILN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
               HINTS ${_kiln_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  if(KILN_CUDNN_INCLUDE_DIR AND KILN_CUDNN_LIBRARY)
    file(STRINGS ${KILN_CUDNN_INCLUDE_DIR}/cudnn_version.h _kiln_cudnn_major
         REGEX "^#define CUDNN_MAJOR [0-9]+")
    string(REGEX REPLACE "^#define CUDNN_MAJOR ([0-9]+).*" "\\1" _kiln_cudnn_major "${_kiln_cudnn_major}")
    if(_kiln_cudnn_major AND _kiln_cudnn_major GREATER_EQUAL 8)
      set(KILN_CUDNN_ENABLED TRUE)
      message(STATUS "kiln: cuDNN ${_kiln_cudnn_major}: ${KILN_CUDNN_LIBRARY}")
    else()
      message(STATUS "kiln: cuDNN at ${KILN_CUDNN_INCLUDE_DIR} is too old (need >= 8)")
    endif()
  endif()
  if(NOT KILN_CUDNN_ENABLED)
    if(KILN_CUDNN STREQUAL "ON")
      message(FATAL_ERROR "KILN_CUDNN=ON but cuDNN was not found (set KILN_CUDNN_ROOT)")
    endif()
    message(STATUS "kiln: cuDNN not found: convolutions use im2col + cuBLASLt")
  endif()
endif()

if(KILN_CUDA_ENABLED)
  message(STATUS "kiln: CUDA backend enabled (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "architectures ${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${KILN_CUDNN_ENABLED})")
endif()

# ---- wiring into the kiln targets -----------------------------------------------
function(_kiln_cuda_attach deferred)
  if(NOT KILN_CUDA_ENABLED)
    return()
  endif()
  get_property(_done GLOBAL PROPERTY KILN_CUDA_ATTACHED)
  if(_done)
    return()
  endif()
  set_property(GLOBAL PROPERTY KILN_CUDA_ATTACHED TRUE)
  if(NOT TARGET kiln_objs OR NOT TARGET kiln OR NOT TARGET kiln_static)
    message(FATAL_ERROR "cuda.cmake: the targets kiln_objs, kiln and kiln_static must exist")
  endif()
  # The C side joins kiln_objs (CMakeLists.txt leaves src/backends/cuda/ out
  # of its glob); the .cu files form their own object library.
  file(GLOB _kiln_cuda_c CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backends/cuda/*.c)
  file(GLOB _kiln_cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backends/cuda/*.cu)
  target_sources(kiln_objs PRIVATE ${_kiln_cuda_c})
  if(KILN_OP_DEFS)
    set_source_files_properties(${_kiln_cuda_c} PROPERTIES OBJECT_DEPENDS "${KILN_OP_DEFS}")
  endif()
  add_library(kiln_cuda_objs OBJECT ${_kiln_cu})
  # The directory's C flags (-Wall -Werror, sanitizers) are not nvcc's: start clean.
  set_property(TARGET kiln_cuda_objs PROPERTY COMPILE_OPTIONS "")
  set_target_properties(kiln_cuda_objs PROPERTIES
    CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF
    POSITION_INDEPENDENT_CODE ON CUDA_SEPARABLE_COMPILATION OFF CUDA_RUNTIME_LIBRARY Shared)
  target_include_directories(kiln_cuda_objs PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src
                                                    ${CMAKE_SOURCE_DIR}/src/backends/cuda)
  target_compile_options(kiln_cuda_objs PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xcompiler=-fvisibility=hidden -Xcompiler=-Wall
      -Xcompiler=-Wextra>)
  target_link_libraries(kiln_cuda_objs PRIVATE CUDA::cudart)

  set(_defs KILN_HAVE_CUDA=1)
  set(_incs ${CUDAToolkit_INCLUDE_DIRS})
  set(_libs CUDA::cudart CUDA::cublasLt)
  if(KILN_CUDNN_ENABLED)
    list(APPEND _defs KILN_HAVE_CUDNN=1)
    list(APPEND _incs ${KILN_CUDNN_INCLUDE_DIR})
    list(APPEND _libs ${KILN_CUDNN_LIBRARY})
  else()
    list(APPEND _defs KILN_HAVE_CUDNN=0)
  endif()
  # static linking (kiln.pc's Libs.private): the CUDA libraries, and libstdc++
  # for the .cu objects' runtime support (kernel registration guards)
  set(_pc "-L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublasLt")
  if(KILN_CUDNN_ENABLED)
    get_filename_component(_pc_cudnn_dir ${KILN_CUDNN_LIBRARY} DIRECTORY)
    get_filename_component(_pc_cudnn_name ${KILN_CUDNN_LIBRARY} NAME)
    string(APPEND _pc " -L${_pc_cudnn_dir} -l:${_pc_cudnn_name}")
  endif()
  set(KILN_PC_CUDA "${_pc} -lstdc++" PARENT_SCOPE)
  target_compile_definitions(kiln_objs PRIVATE ${_defs})
  target_include_directories(kiln_objs PRIVATE ${_incs})
  # They compile no CUDA themselves (and may predate CMAKE_CUDA_ARCHITECTURES).
  set_target_properties(kiln kiln_static PROPERTIES LINKER_LANGUAGE C CUDA_ARCHITECTURES OFF)
  foreach(t kiln kiln_static)
    target_sources(${t} PRIVATE $<TARGET_OBJECTS:kiln_cuda_objs>)
    target_link_libraries(${t} PUBLIC ${_libs})
    target_compile_definitions(${t} INTERFACE $<BUILD_INTERFACE:${_defs}>)
    target_include_directories(${t} INTERFACE $<BUILD_INTERFACE:${_incs}>)
  endforeach()
  if(KILN_CUDNN_ENABLED)
    # cuDNN 9 loads its sub-libraries from its own folder at run time
    get_filename_component(_cudnn_dir ${KILN_CUDNN_LIBRARY} DIRECTORY)
    set_property(TARGET kiln APPEND PROPERTY BUILD_RPATH ${_cudnn_dir})
  endif()
  # Injected builds (CMAKE_PROJECT_kiln_INCLUDE) register the GPU tests here;
  # otherwise tests/tests.cmake includes tests/cuda/tests.cmake itself.
  if(deferred AND KILN_BUILD_TESTS AND EXISTS ${CMAKE_SOURCE_DIR}/tests/cuda/tests.cmake)
    include(${CMAKE_SOURCE_DIR}/tests/cuda/tests.cmake)
  endif()
endfunction()

if(TARGET kiln_static)
  _kiln_cuda_attach(FALSE)
elseif(KILN_CUDA_ENABLED)
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _kiln_cuda_attach TRUE)
endif()
