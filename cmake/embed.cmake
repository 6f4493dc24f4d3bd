# cmake -DIN=file -DOUT=file -P embed.cmake: writes the text of IN as a C
# string literal to OUT, one literal per line of IN, so that a C file can
# `#include` it as the initializer of a char array. Device code lives in
# .cuh.inc files as plain CUDA; the generator that emits it includes this
# form. The file's leading `//` lines are notes for its reader and are left
# out; the rest is the emitted text, byte for byte. Backslashes, quotes and
# question marks (trigraphs in strict C17) are escaped.
file(READ "${IN}" text)
string(REGEX REPLACE "^(//[^\n]*\n)+" "" text "${text}")
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "?" "\\?" text "${text}")
string(REPLACE "\n" "\\n\"\n\"" text "${text}")
file(WRITE "${OUT}.tmp" "/* Generated from ${IN} by cmake/embed.cmake: edit that file. */\n\"${text}\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
