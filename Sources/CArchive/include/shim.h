// libarchive for the Import module (the one module that calls it): the entries of a .zip (a KMZ,
// a Google Takeout archive) read as streams, never extracted to disk. Loaded by loader.c with the
// first archive import rather than linked: a server that never imports would otherwise map
// libarchive and the libraries only it needs (liblzma, libzstd, libbz2, libnettle, libacl...),
// relocated pages of each resident (docs/benchmarks.md, "Libraries loaded on first use"). The
// archive_* functions Import calls are defined in loader.c under their own names and call
// libarchive's through dlsym; the headers come from libarchive-dev.
#ifndef FINDMY_CARCHIVE_SHIM_H
#define FINDMY_CARCHIVE_SHIM_H

#include <archive.h>
#include <archive_entry.h>

/// Loads libarchive (libarchive.so.13) and looks up the functions Import calls, once; NULL when
/// done, else why it could not be (the library missing, or a function missing from it). Every
/// function loader.c defines loads it too, and ends the process with that text when it cannot:
/// callers load first.
const char *findmy_archive_load(void);

/// 1 when the entry is a regular file. AE_IFREG is a macro with a cast, which Swift does not
/// import.
int findmy_archive_entry_is_regular_file(struct archive_entry *entry);

#endif
