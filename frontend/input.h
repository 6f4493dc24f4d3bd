/*
 * input.h - reading a model file whole, within bounds.
 *
 * A path names a regular file; "-" names standard input (a pipe, or
 * whatever it is). Anything else (a device such as /dev/zero, a FIFO, a
 * directory, a socket) is refused before a byte is read: reading a device
 * never ends, and opening a FIFO that has no writer blocks for ever. The
 * text may hold at most `max` bytes (a regular file is measured before it
 * is read), and a NUL byte, which no text format of fusec has, ends the
 * read where it is found: a binary file or a stream of zeros fails at its
 * first chunk, not after it filled memory.
 */
#ifndef FC_INPUT_H
#define FC_INPUT_H

#include "ir.h"

#include <stddef.h>

/* The largest .ir file fc_parse_file reads (fc_parse itself takes text of
 * any size from memory). 1 GiB: twenty times the largest graph text seen. */
#define FC_INPUT_MAX_BYTES ((size_t)1 << 30)

/* On success *text is a new NUL-terminated buffer (fc_ctx_malloc) of *len
 * bytes. FC_ERR_INPUT with "PATH: error: ..." when the input is refused or
 * cannot be read. `what` names the format in messages ("a .ir file"). */
fc_status fc_read_input(fc_context *ctx, const char *path, const char *what, size_t max, char **text, size_t *len);

#endif
