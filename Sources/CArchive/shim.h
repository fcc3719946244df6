// libarchive for the Import module (the one module that calls it): the entries of a .zip (a KMZ,
// a Google Takeout archive) read as streams, never extracted to disk. AE_IFREG is a macro with a
// cast, which Swift does not import: a function returning it.
#ifndef FINDMY_CARCHIVE_SHIM_H
#define FINDMY_CARCHIVE_SHIM_H

#include <archive.h>
#include <archive_entry.h>

static inline int findmy_archive_entry_is_regular_file(struct archive_entry *entry) {
    return archive_entry_filetype(entry) == AE_IFREG;
}

#endif
