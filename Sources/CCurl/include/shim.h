// libcurl for the HTTPClient module (the one module that calls it), loaded by loader.c when the
// first request goes out rather than linked: a server that never sends one (most, while they
// ingest) would otherwise map libcurl and the libraries only it needs (librtmp, libssh2, nghttp2,
// libpsl, brotli), relocated pages of each resident (docs/benchmarks.md, "Serve memory while
// ingesting"). The curl_* functions findmy calls are defined in loader.c under their own names and
// call libcurl's through dlsym. curl_easy_setopt, curl_multi_setopt and curl_easy_getinfo are
// variadic, which Swift cannot call: typed wrappers, one per argument type.
#ifndef FINDMY_CCURL_SHIM_H
#define FINDMY_CCURL_SHIM_H

#include <curl/curl.h>

/// Loads libcurl (libcurl.so.4) and looks up the functions findmy calls, once; NULL when done,
/// else why it could not be (the library missing, or a function missing from it). Every function
/// below loads it too, and ends the process with that text when it cannot.
const char *findmy_curl_load(void);

typedef size_t (*findmy_curl_data_callback)(char *data, size_t size, size_t count, void *context);
typedef curl_socket_t (*findmy_curl_opensocket_callback)(
    void *context, curlsocktype purpose, struct curl_sockaddr *address);
typedef int (*findmy_curl_closesocket_callback)(void *context, curl_socket_t socket);

CURLcode findmy_curl_easy_setopt_long(CURL *easy, CURLoption option, long value);
CURLcode findmy_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value);
CURLcode findmy_curl_easy_setopt_string(CURL *easy, CURLoption option, const char *value);
CURLcode findmy_curl_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value);
CURLcode findmy_curl_easy_setopt_callback(CURL *easy, CURLoption option, findmy_curl_data_callback value);
CURLcode findmy_curl_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value);
CURLcode findmy_curl_easy_setopt_opensocket(CURL *easy, findmy_curl_opensocket_callback value);
CURLcode findmy_curl_easy_setopt_closesocket(CURL *easy, findmy_curl_closesocket_callback value);
CURLMcode findmy_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value);
CURLcode findmy_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value);
CURLcode findmy_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value);
/// 1 when this libcurl speaks HTTP/2 (built with nghttp2).
int findmy_curl_has_http2(void);

/// The socket address libcurl is about to connect to: `addrlen` bytes from here (libcurl's storage
/// behind `addr` is large enough for an IPv6 address, which `struct sockaddr` alone is not).
static inline const struct sockaddr *findmy_curl_sockaddr_address(const struct curl_sockaddr *address) {
    return &address->addr;
}
/// The easy handle and result of a finished transfer, or 0 when the message is not a "done".
static inline int findmy_curl_message_done(CURLMsg *message, CURL **easy, CURLcode *result) {
    if (message->msg != CURLMSG_DONE) return 0;
    *easy = message->easy_handle;
    *result = message->data.result;
    return 1;
}

#endif
