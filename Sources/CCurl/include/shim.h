// libcurl for the HTTPClient module (the one module that calls it). curl_easy_setopt, curl_multi_setopt
// and curl_easy_getinfo are variadic, which Swift cannot call: typed wrappers, one per argument type.
#ifndef FINDMY_CCURL_SHIM_H
#define FINDMY_CCURL_SHIM_H

#include <curl/curl.h>

typedef size_t (*findmy_curl_data_callback)(char *data, size_t size, size_t count, void *context);

static inline CURLcode findmy_curl_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode findmy_curl_easy_setopt_pointer(CURL *easy, CURLoption option, const void *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode findmy_curl_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode findmy_curl_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode findmy_curl_easy_setopt_callback(
    CURL *easy, CURLoption option, findmy_curl_data_callback value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode findmy_curl_easy_setopt_off(CURL *easy, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(easy, option, value);
}
typedef curl_socket_t (*findmy_curl_opensocket_callback)(
    void *context, curlsocktype purpose, struct curl_sockaddr *address);

static inline CURLcode findmy_curl_easy_setopt_opensocket(CURL *easy, findmy_curl_opensocket_callback value) {
    return curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, value);
}
typedef int (*findmy_curl_closesocket_callback)(void *context, curl_socket_t socket);

static inline CURLcode findmy_curl_easy_setopt_closesocket(CURL *easy, findmy_curl_closesocket_callback value) {
    return curl_easy_setopt(easy, CURLOPT_CLOSESOCKETFUNCTION, value);
}
/// The socket address libcurl is about to connect to: `addrlen` bytes from here (libcurl's storage
/// behind `addr` is large enough for an IPv6 address, which `struct sockaddr` alone is not).
static inline const struct sockaddr *findmy_curl_sockaddr_address(const struct curl_sockaddr *address) {
    return &address->addr;
}
static inline CURLMcode findmy_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}
static inline CURLcode findmy_curl_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLcode findmy_curl_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}
/// The easy handle and result of a finished transfer, or 0 when the message is not a "done".
static inline int findmy_curl_message_done(CURLMsg *message, CURL **easy, CURLcode *result) {
    if (message->msg != CURLMSG_DONE) return 0;
    *easy = message->easy_handle;
    *result = message->data.result;
    return 1;
}
/// 1 when this libcurl speaks HTTP/2 (built with nghttp2).
static inline int findmy_curl_has_http2(void) {
    curl_version_info_data *info = curl_version_info(CURLVERSION_NOW);
    return (info->features & CURL_VERSION_HTTP2) != 0;
}

#endif
