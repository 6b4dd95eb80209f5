# stoker_layer(<folder> [DEPENDS <folder>...] SOURCES <sources>...): the library target stoker_<folder> of one
# folder of the tree. It compiles against build/layers/<folder>/, a view of the source tree holding
# symbolic links to <folder> and to every folder before it in the order (its DEPENDS and theirs), so
# that `#include "doctor/doctor.h"` in data/ fails to compile instead of quietly inverting the layers.
# Its users see the same view (its INTERFACE include directory); the installed package's headers sit
# under include/stoker in the source layout. Appends <folder> to STOKER_LAYERS (the order).
set(STOKER_LAYERS "" CACHE INTERNAL "")

function(stoker_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DEPENDS;SOURCES")
  set(sources ${arg_SOURCES})
  # The folders this one may include: itself and, transitively, what it depends on.
  set(visible ${name})
  foreach(dep IN LISTS arg_DEPENDS)
    get_property(dep_visible GLOBAL PROPERTY STOKER_LAYER_VISIBLE_${dep})
    list(APPEND visible ${dep_visible})
  endforeach()
  list(REMOVE_DUPLICATES visible)
  set_property(GLOBAL PROPERTY STOKER_LAYER_VISIBLE_${name} "${visible}")

  set(view "${PROJECT_BINARY_DIR}/layers/${name}")
  file(REMOVE_RECURSE "${view}")
  file(MAKE_DIRECTORY "${view}")
  foreach(folder IN LISTS visible)
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/${folder}" "${view}/${folder}" SYMBOLIC)
  endforeach()

  add_library(stoker_${name} STATIC ${sources})
  target_include_directories(stoker_${name} PUBLIC
    $<BUILD_INTERFACE:${view}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/stoker>)
  foreach(dep IN LISTS arg_DEPENDS)
    target_link_libraries(stoker_${name} PUBLIC stoker_${dep})
  endforeach()
  target_compile_options(stoker_${name} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")
  set_target_properties(stoker_${name} PROPERTIES EXPORT_NAME stoker_${name})
  set(STOKER_LAYERS ${STOKER_LAYERS} ${name} CACHE INTERNAL "")
endfunction()
