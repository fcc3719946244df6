// libcurl loaded on first use (shim.h says why). Each curl_* function findmy calls is defined here
// under its own name and forwards to libcurl's, looked up once; the library is opened RTLD_LOCAL, so
// nothing else in the process binds to it.
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim.h"

#define FINDMY_CURL_LIBRARY "libcurl.so.4"

// The functions with a result: (result type, name, parameters, arguments).
#define FINDMY_CURL_FUNCTIONS(X)                                                                           \
    X(CURLcode, curl_global_init, (long flags), (flags))                                                \
    X(CURL *, curl_easy_init, (void), ())                                                               \
    X(CURLcode, curl_easy_perform, (CURL * easy), (easy))                                               \
    X(const char *, curl_easy_strerror, (CURLcode code), (code))                                        \
    X(CURLM *, curl_multi_init, (void), ())                                                             \
    X(CURLMcode, curl_multi_add_handle, (CURLM * multi, CURL * easy), (multi, easy))                    \
    X(CURLMcode, curl_multi_remove_handle, (CURLM * multi, CURL * easy), (multi, easy))                 \
    X(CURLMcode, curl_multi_cleanup, (CURLM * multi), (multi))                                          \
    X(CURLMsg *, curl_multi_info_read, (CURLM * multi, int *queued), (multi, queued))                   \
    X(CURLMcode, curl_multi_perform, (CURLM * multi, int *running), (multi, running))                   \
    X(CURLMcode, curl_multi_poll,                                                                       \
        (CURLM * multi, struct curl_waitfd * fds, unsigned int count, int timeout, int *events),        \
        (multi, fds, count, timeout, events))                                                           \
    X(CURLMcode, curl_multi_wakeup, (CURLM * multi), (multi))                                           \
    X(struct curl_slist *, curl_slist_append, (struct curl_slist * list, const char *text), (list, text)) \
    X(curl_version_info_data *, curl_version_info, (CURLversion version), (version))

// The functions without one.
#define FINDMY_CURL_PROCEDURES(X)                                                                          \
    X(curl_easy_cleanup, (CURL * easy), (easy))                                                         \
    X(curl_easy_reset, (CURL * easy), (easy))                                                           \
    X(curl_slist_free_all, (struct curl_slist * list), (list))

#define FINDMY_POINTER(result, name, parameters, arguments) static result(*real_##name) parameters;
#define FINDMY_PROCEDURE_POINTER(name, parameters, arguments) static void(*real_##name) parameters;
FINDMY_CURL_FUNCTIONS(FINDMY_POINTER)
FINDMY_CURL_PROCEDURES(FINDMY_PROCEDURE_POINTER)
static CURLcode (*real_curl_easy_setopt)(CURL *, CURLoption, ...);
static CURLcode (*real_curl_easy_getinfo)(CURL *, CURLINFO, ...);
static CURLMcode (*real_curl_multi_setopt)(CURLM *, CURLMoption, ...);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];
static int loaded;

static int look_up(void *library, const char *name, void **pointer) {
    *pointer = dlsym(library, name);
    if (*pointer == NULL) {
        snprintf(load_error, sizeof load_error, "%s has no function %s: findmy needs libcurl 7.68 or later",
            FINDMY_CURL_LIBRARY, name);
        return 0;
    }
    return 1;
}

static void load(void) {
    void *library = dlopen(FINDMY_CURL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(load_error, sizeof load_error,
            "libcurl could not be loaded (%s); findmy sends every outgoing HTTP request (push "
            "providers, ntfy, webhooks, UnifiedPush, headscale) with it: install libcurl 4 built with "
            "OpenSSL (Debian: apt install libcurl4)",
            dlerror());
        return;
    }
#define FINDMY_LOOK_UP(result, name, parameters, arguments) \
    if (!look_up(library, #name, (void **)&real_##name)) return;
#define FINDMY_LOOK_UP_PROCEDURE(name, parameters, arguments) \
    if (!look_up(library, #name, (void **)&real_##name)) return;
    FINDMY_CURL_FUNCTIONS(FINDMY_LOOK_UP)
    FINDMY_CURL_PROCEDURES(FINDMY_LOOK_UP_PROCEDURE)
    if (!look_up(library, "curl_easy_setopt", (void **)&real_curl_easy_setopt)) return;
    if (!look_up(library, "curl_easy_getinfo", (void **)&real_curl_easy_getinfo)) return;
    if (!look_up(library, "curl_multi_setopt", (void **)&real_curl_multi_setopt)) return;
    loaded = 1;
}

const char *findmy_curl_load(void) {
    pthread_once(&load_once, load);
    return loaded ? NULL : load_error;
}

// Callers load first (HTTPClient's global initialisation); one that did not ends here with the same
// text rather than calling through a null pointer.
static void require_loaded(void) {
    const char *error = findmy_curl_load();
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
#define FINDMY_FORWARD_PROCEDURE(name, parameters, arguments) \
    void name parameters {                                    \
        require_loaded();                                     \
        real_##name arguments;                                \
    }
FINDMY_CURL_FUNCTIONS(FINDMY_FORWARD)
FINDMY_CURL_PROCEDURES(FINDMY_FORWARD_PROCEDURE)

CURLcode findmy_curl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_callback(CURL *easy, CURLoption option, findmy_curl_data_callback value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) {
    require_loaded();
    return real_curl_easy_setopt(easy, option, value);
}
CURLcode findmy_curl_easy_setopt_opensocket(CURL *easy, findmy_curl_opensocket_callback value) {
    require_loaded();
    return real_curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, value);
}
CURLcode findmy_curl_easy_setopt_closesocket(CURL *easy, findmy_curl_closesocket_callback value) {
    require_loaded();
    return real_curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, value);
}
CURLMcode findmy_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    require_loaded();
    return real_curl_multi_setopt(multi, option, value);
}
CURLcode findmy_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    require_loaded();
    return real_curl_easy_getinfo(easy, info, value);
}
CURLcode findmy_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    require_loaded();
    return real_curl_easy_getinfo(easy, info, value);
}
int findmy_curl_has_http2(void) {
    curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
    return (info->features & CURL_VERSION_HTTP2) != 0;
}
