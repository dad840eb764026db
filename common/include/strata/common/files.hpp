// Writing output files without ever leaving a partial one, and without destroying what a path
// names: a regular file is replaced atomically (a fresh temporary beside it, then rename), a
// symbolic link is followed (the file it points to is replaced, the link stays), and a special file
// (/dev/null, a FIFO, a terminal) is written in place, since renaming over it would replace the
// device or pipe by a regular file, and /dev/stdout (/dev/fd/N) is the descriptor the process holds.
// docs/reliability.md describes the rules.
#pragma once
#include <string>

namespace strata {

/// Write `text` to `path` as described above. A regular file appears whole or not at all: the
/// text goes to an unused temporary name in the same folder (never `path.tmp`, which may be the
/// user's), is flushed to disk, keeps the mode of the file it replaces, and is renamed over it.
/// SIGINT, SIGTERM and SIGHUP are held back in the calling thread from the temporary's creation to
/// the rename, so Ctrl-C cannot leave the temporary behind. Failure: RuntimeError naming `path`;
/// nothing is left at the temporary name and `path` is unchanged.
void write_file_atomic(const std::string& path, const std::string& text);

/// The descriptor a path names directly, or -1: /dev/stdout (1), /dev/stderr (2), /dev/fd/N and
/// /proc/self/fd/N (N). write_file_atomic writes to that descriptor, as a shell redirection does.
int standard_fd(const std::string& path);

/// Why `path` could not be written by write_file_atomic, checked before any work is done: "" when
/// it can (its folder exists and is writable, or it is a writable special file), else the reason
/// ("folder /x does not exist", "is a directory", "permission denied", ...). Creates nothing.
std::string unwritable_reason(const std::string& path);

}  // namespace strata
