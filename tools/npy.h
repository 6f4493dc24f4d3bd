/*
 * npy.h - read and write NumPy .npy files (format versions 1.0, 2.0, 3.0).
 *
 * Supported: little-endian, C order, dtypes
 *     <f8 -> f64   <f4 -> f32   <f2 -> f16
 *     <i8 -> i64   <i4 -> i32   |i1 -> i8
 *     |b1 -> bool  |u1 -> bool (any nonzero byte reads as 1)
 * Everything else (big-endian data, fortran_order True, other dtypes) is a
 * clear error. The reader never reads past the data it was given and checks
 * every size before it allocates: a truncated or corrupt file is an error,
 * never a crash. bf16 has no .npy dtype: convert it to f32 before writing.
 *
 * Errors are written to `err` (errlen bytes, always NUL-terminated) as one
 * line that begins with the file's name.
 */
#ifndef FC_TOOLS_NPY_H
#define FC_TOOLS_NPY_H

#include "fusec.h"

#include <stddef.h>
#include <stdio.h>

/* Largest header (the dict text) the reader accepts, in bytes. */
#define NPY_MAX_HEADER_LEN (1u << 20)

/*
 * Read a .npy file into *t. On success returns 0 and t->data is a new
 * buffer allocated with malloc (free it with npy_tensor_free). On failure
 * returns -1, *t is zeroed and err holds the reason.
 */
int npy_read(const char *path, fc_tensor *t, char *err, size_t errlen);
/* As npy_read, from an open stream; `name` is used in messages. The stream
 * must be positioned at the start of the .npy data and hold nothing after it. */
int npy_read_stream(FILE *f, const char *name, fc_tensor *t, char *err, size_t errlen);

/*
 * Write *t as a .npy file (version 1.0, or 2.0 when the header needs it).
 * Returns 0, or -1 with err set (unsupported dtype such as bf16, I/O error).
 */
int npy_write(const char *path, const fc_tensor *t, char *err, size_t errlen);
/* As npy_write, to an open stream; `name` is used in messages. */
int npy_write_stream(FILE *f, const char *name, const fc_tensor *t, char *err, size_t errlen);

/* Free the data of a tensor read by npy_read and zero it. NULL is ignored. */
void npy_tensor_free(fc_tensor *t);

/* The .npy descr of dt ("<f4", ...), or NULL if dt has none (bf16). */
const char *npy_descr(fc_dtype dt);

#endif
