# Layering check, run by CTest (tests/CMakeLists.txt): fails when a source file under
# ${ROOT}/${DIR} includes a header under ${FORBIDDEN} (a folder, such as "coordinator/"),
# naming each such line.
#   cmake -DROOT=<source dir> -DDIR=<folder> -DFORBIDDEN=<folder/> -P no_includes.cmake
foreach(var ROOT DIR FORBIDDEN)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "no_includes.cmake: give -D${var}=...")
  endif()
endforeach()

file(GLOB_RECURSE sources ${ROOT}/${DIR}/*.h ${ROOT}/${DIR}/*.hpp ${ROOT}/${DIR}/*.cc
     ${ROOT}/${DIR}/*.cpp)
list(LENGTH sources count)
if(count EQUAL 0)
  # A misspelt folder would pass with nothing checked.
  message(FATAL_ERROR "no source files under ${ROOT}/${DIR}")
endif()

set(found "")
foreach(source ${sources})
  file(STRINGS ${source} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]${FORBIDDEN}")
  foreach(line ${lines})
    file(RELATIVE_PATH where ${ROOT} ${source})
    string(APPEND found "\n  ${where}: ${line}")
  endforeach()
endforeach()
if(found)
  message(FATAL_ERROR "${DIR}/ must include nothing from ${FORBIDDEN}:${found}")
endif()
message(STATUS "${count} files under ${DIR}/ include nothing from ${FORBIDDEN}")
