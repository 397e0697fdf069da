# cmake -DIN=README.md -DOUT=file.c -P extract_c_block.cmake
# Writes the first ```c code block of IN to OUT: the README's C quick start, which
# tests/cli.cmake compiles as written and ctest cli_docs runs.
file(READ "${IN}" text)
string(FIND "${text}" "\n```c\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${IN}: no ```c code block (the C quick start)")
endif()
math(EXPR start "${start} + 6")
string(SUBSTRING "${text}" ${start} -1 rest)
string(FIND "${rest}" "\n```\n" end)
if(end EQUAL -1)
  message(FATAL_ERROR "${IN}: the ```c code block does not end")
endif()
math(EXPR end "${end} + 1")
string(SUBSTRING "${rest}" 0 ${end} code)
file(WRITE "${OUT}.tmp" "${code}")
file(RENAME "${OUT}.tmp" "${OUT}")
