/*
 * outfile.h - writing a file the user named (fusec -o, fc_program_save_file).
 *
 * The file is written whole through a temporary file in its directory and
 * a rename, so a reader sees the old file or the new one, never a part. A
 * rename replaces whatever the name stood for, so the name is checked
 * first, as cp and install would:
 *   - a missing name: a new file (mode 0666 less the umask);
 *   - an existing regular file: replaced only if this process could have
 *     opened it for writing; the new file keeps its permission bits;
 *   - a symlink: written to the file it points to (cp's convention), which
 *     must itself pass these checks; a dangling symlink is refused;
 *   - a directory, character or block device, FIFO or socket: refused.
 * FC_ERR_RUNTIME with the reason when the name is refused or writing fails
 * (the CLI's exit 3: a file that cannot be written).
 */
#ifndef FC_OUTFILE_H
#define FC_OUTFILE_H

#include "ir.h"

#include <stddef.h>
#include <sys/types.h>

fc_status fc_write_file_atomic(fc_context *ctx, const char *path, const void *data, size_t n);
/* The checks fc_write_file_atomic makes of the name before it writes, on
 * their own: FC_OK when it would write there, else its error. Nothing is
 * created or changed. So that a caller can refuse a name before spending
 * time on what it would write (fusec -o checks before it compiles). */
fc_status fc_output_check(fc_context *ctx, const char *path);

/* What a file of mode m is, for a message that refuses it: "a directory",
 * "a character device", "a FIFO", ... */
const char *fc_file_kind(mode_t m);

#endif
