# heft's layers: each folder of src/ is one target, and a file of a layer may
# include headers of its own folder and of the layers its target links
# (directly or through them) only. heft_layer() registers a target and its
# folder; heft_check_layers(), called once every layer is defined, makes each
# target depend on a check of its folder's #include lines
# (cmake/check_includes.cmake), so an include upwards fails the build.

# heft_layer(TARGET FOLDER [EXTRA_FOLDERS...]): TARGET is built from src/FOLDER
# (EXTRA_FOLDERS: further include roots it owns, e.g. "heft" for include/heft).
function(heft_layer target folder)
  set_property(TARGET ${target} PROPERTY HEFT_LAYER_FOLDERS ${folder} ${ARGN})
  set_property(TARGET ${target} PROPERTY HEFT_LAYER_SOURCE ${PROJECT_SOURCE_DIR}/src/${folder})
  set_property(GLOBAL APPEND PROPERTY HEFT_LAYERS ${target})
endfunction()

# The include roots `target` may use: its own and those of every layer it links.
function(_heft_layer_roots target out)
  set(roots "")
  set(pending ${target})
  set(seen "")
  while(pending)
    list(POP_FRONT pending current)
    if(current IN_LIST seen OR NOT TARGET ${current})
      continue()
    endif()
    list(APPEND seen ${current})
    get_target_property(folders ${current} HEFT_LAYER_FOLDERS)
    if(folders)
      list(APPEND roots ${folders})
    endif()
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(linked ${current} ${property})
      if(linked)
        foreach(dependency IN LISTS linked)
          if(dependency MATCHES "^heft_")
            list(APPEND pending ${dependency})
          endif()
        endforeach()
      endif()
    endforeach()
  endwhile()
  list(REMOVE_DUPLICATES roots)
  set(${out} ${roots} PARENT_SCOPE)
endfunction()

function(heft_check_layers)
  get_property(layers GLOBAL PROPERTY HEFT_LAYERS)
  foreach(target IN LISTS layers)
    _heft_layer_roots(${target} roots)
    get_target_property(source ${target} HEFT_LAYER_SOURCE)
    file(GLOB_RECURSE files CONFIGURE_DEPENDS ${source}/*.h ${source}/*.cc)
    set(stamp ${PROJECT_BINARY_DIR}/layers/${target}.checked)
    string(REPLACE ";" "," roots_arg "${roots}")
    add_custom_command(
      OUTPUT ${stamp}
      COMMAND ${CMAKE_COMMAND} -DLAYER=${target} -DFOLDER=${source} "-DALLOWED=${roots_arg}" -DSTAMP=${stamp}
              -P ${PROJECT_SOURCE_DIR}/cmake/check_includes.cmake
      DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/check_includes.cmake
      COMMENT "Checking that ${target} includes only the layers it links"
      VERBATIM)
    add_custom_target(${target}_layer_check DEPENDS ${stamp})
    add_dependencies(${target} ${target}_layer_check)
  endforeach()
endfunction()
