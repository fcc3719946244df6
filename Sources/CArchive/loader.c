// libarchive loaded on first use (shim.h says why). Each archive_* function Import calls is
// defined here under its own name and forwards to libarchive's, looked up once; the library is
// opened RTLD_LOCAL, so nothing else in the process binds to it.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim.h"

#define FINDMY_ARCHIVE_LIBRARY "libarchive.so.13"

// (result type, name, parameters, arguments).
#define FINDMY_ARCHIVE_FUNCTIONS(X)                                                                 \
    X(struct archive *, archive_read_new, (void), ())                                            \
    X(int, archive_read_support_format_zip, (struct archive * archive), (archive))               \
    X(int, archive_read_open,                                                                    \
        (struct archive * archive, void *client_data, archive_open_callback *opener,             \
            archive_read_callback *reader, archive_close_callback *closer),                      \
        (archive, client_data, opener, reader, closer))                                          \
    X(int, archive_read_free, (struct archive * archive), (archive))                             \
    X(int, archive_read_next_header, (struct archive * archive, struct archive_entry * *entry),  \
        (archive, entry))                                                                        \
    X(la_ssize_t, archive_read_data, (struct archive * archive, void *buffer, size_t size),      \
        (archive, buffer, size))                                                                 \
    X(const char *, archive_error_string, (struct archive * archive), (archive))                 \
    X(__LA_MODE_T, archive_entry_filetype, (struct archive_entry * entry), (entry))              \
    X(const char *, archive_entry_pathname, (struct archive_entry * entry), (entry))             \
    X(la_int64_t, archive_entry_size, (struct archive_entry * entry), (entry))                   \
    X(int, archive_entry_size_is_set, (struct archive_entry * entry), (entry))

#define FINDMY_POINTER(result, name, parameters, arguments) static result(*real_##name) parameters;
FINDMY_ARCHIVE_FUNCTIONS(FINDMY_POINTER)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int loaded;

static int look_up(void *library, const char *name, void **pointer) {
    *pointer = dlsym(library, name);
    if (*pointer == NULL) {
        snprintf(load_error, sizeof load_error, "%s has no function %s: findmy needs libarchive 3.4 or later",
            FINDMY_ARCHIVE_LIBRARY, name);
        return 0;
    }
    return 1;
}

static void load(void) {
    void *library = dlopen(FINDMY_ARCHIVE_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error,
            "libarchive could not be loaded (%s); findmy reads KMZ and .zip files with it: install "
            "libarchive 13 (Debian: apt install libarchive13)",
            dlerror());
        return;
    }
#define FINDMY_LOOK_UP(result, name, parameters, arguments) \
    if (!look_up(library, #name, (void **)&real_##name)) return;
    FINDMY_ARCHIVE_FUNCTIONS(FINDMY_LOOK_UP)
    loaded = 1;
}

const char *findmy_archive_load(void) {
    pthread_once(&load_once, load);
    return loaded ? NULL : load_error;
}

// Callers load first (ArchiveReader's start); one that did not ends here with the same text
// rather than calling through a null pointer.
static void require_loaded(void) {
    const char *error = findmy_archive_load();
    if (error != NULL) {
        fprintf(stderr, "findmy: %s\n", error);
        abort();
    }
}

#define FINDMY_FORWARD(result, name, parameters, arguments) \
    result name parameters {                                \
        require_loaded();                                   \
        return real_##name arguments;                       \
    }
FINDMY_ARCHIVE_FUNCTIONS(FINDMY_FORWARD)

int findmy_archive_entry_is_regular_file(struct archive_entry *entry) {
    return archive_entry_filetype(entry) == AE_IFREG;
}
