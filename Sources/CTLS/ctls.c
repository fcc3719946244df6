#include "ctls.h"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/opensslv.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

_Static_assert(FINDMY_SSL_ERROR_WANT_READ == SSL_ERROR_WANT_READ, "SSL_ERROR_WANT_READ");
_Static_assert(FINDMY_SSL_ERROR_WANT_WRITE == SSL_ERROR_WANT_WRITE, "SSL_ERROR_WANT_WRITE");
_Static_assert(FINDMY_SSL_ERROR_SYSCALL == SSL_ERROR_SYSCALL, "SSL_ERROR_SYSCALL");
_Static_assert(FINDMY_SSL_ERROR_ZERO_RETURN == SSL_ERROR_ZERO_RETURN, "SSL_ERROR_ZERO_RETURN");
_Static_assert(FINDMY_X509_V_OK == X509_V_OK, "X509_V_OK");

// The library built against: libssl.so.3 for OpenSSL 3 (the soname its headers name).
#define FINDMY_STRING(x) #x
#define FINDMY_SONAME(version) "libssl.so." FINDMY_STRING(version)

static struct {
    const SSL_METHOD *(*client_method)(void);
    SSL_CTX *(*ctx_new)(const SSL_METHOD *);
    void (*ctx_free)(SSL_CTX *);
    long (*ctx_ctrl)(SSL_CTX *, int, long, void *);
    void (*ctx_set_verify)(SSL_CTX *, int, SSL_verify_cb);
    int (*ctx_load_verify_locations)(SSL_CTX *, const char *, const char *);
    int (*ctx_set_default_verify_paths)(SSL_CTX *);
    SSL *(*ssl_new)(SSL_CTX *);
    void (*ssl_free)(SSL *);
    long (*ssl_ctrl)(SSL *, int, long, void *);
    int (*set1_host)(SSL *, const char *);
    int (*set_fd)(SSL *, int);
    int (*connect)(SSL *);
    long (*get_verify_result)(const SSL *);
    const char *(*verify_cert_error_string)(long);
    int (*pending)(const SSL *);
    int (*read)(SSL *, void *, int);
    int (*write)(SSL *, const void *, int);
    int (*get_error)(const SSL *, int);
    int (*shutdown)(SSL *);
    void (*err_clear_error)(void);
    unsigned long (*err_get_error)(void);
    unsigned long (*err_peek_error)(void);
    void (*err_error_string_n)(unsigned long, char *, size_t);
} api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char failure[512];

// dlsym through a union: ISO C has no cast between object and function pointers.
static int bind_symbol(void *library, const char *name, void *slot) {
    void *symbol = dlsym(library, name);
    if (symbol == NULL) {
        snprintf(failure, sizeof failure, "%s has no %s: %s", FINDMY_SONAME(OPENSSL_SHLIB_VERSION), name,
                 dlerror());
        return 0;
    }
    memcpy(slot, &symbol, sizeof symbol);
    return 1;
}

static void load(void) {
    void *library = dlopen(FINDMY_SONAME(OPENSSL_SHLIB_VERSION), RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        snprintf(failure, sizeof failure, "cannot load OpenSSL's %s (Debian's package libssl3): %s",
                 FINDMY_SONAME(OPENSSL_SHLIB_VERSION), dlerror());
        return;
    }
    // dlsym on libssl's handle finds libcrypto's functions too: libssl depends on it.
    if (bind_symbol(library, "TLS_client_method", &api.client_method) && bind_symbol(library, "SSL_CTX_new", &api.ctx_new)
        && bind_symbol(library, "SSL_CTX_free", &api.ctx_free) && bind_symbol(library, "SSL_CTX_ctrl", &api.ctx_ctrl)
        && bind_symbol(library, "SSL_CTX_set_verify", &api.ctx_set_verify)
        && bind_symbol(library, "SSL_CTX_load_verify_locations", &api.ctx_load_verify_locations)
        && bind_symbol(library, "SSL_CTX_set_default_verify_paths", &api.ctx_set_default_verify_paths)
        && bind_symbol(library, "SSL_new", &api.ssl_new) && bind_symbol(library, "SSL_free", &api.ssl_free)
        && bind_symbol(library, "SSL_ctrl", &api.ssl_ctrl) && bind_symbol(library, "SSL_set1_host", &api.set1_host)
        && bind_symbol(library, "SSL_set_fd", &api.set_fd) && bind_symbol(library, "SSL_connect", &api.connect)
        && bind_symbol(library, "SSL_get_verify_result", &api.get_verify_result)
        && bind_symbol(library, "X509_verify_cert_error_string", &api.verify_cert_error_string)
        && bind_symbol(library, "SSL_pending", &api.pending) && bind_symbol(library, "SSL_read", &api.read)
        && bind_symbol(library, "SSL_write", &api.write) && bind_symbol(library, "SSL_get_error", &api.get_error)
        && bind_symbol(library, "SSL_shutdown", &api.shutdown) && bind_symbol(library, "ERR_clear_error", &api.err_clear_error)
        && bind_symbol(library, "ERR_get_error", &api.err_get_error)
        && bind_symbol(library, "ERR_peek_error", &api.err_peek_error)
        && bind_symbol(library, "ERR_error_string_n", &api.err_error_string_n)) {
        failure[0] = 0;
        return;
    }
    // A library without one of the calls: none of them is used.
    memset(&api, 0, sizeof api);
}

int findmy_tls_load(char *why, size_t size) {
    pthread_once(&once, load);
    if (api.err_error_string_n != NULL) return 1;
    if (size > 0) snprintf(why, size, "%s", failure[0] ? failure : "OpenSSL was not loaded");
    return 0;
}

SSL_CTX *findmy_ssl_ctx_new_client(void) { return api.ctx_new(api.client_method()); }
void findmy_ssl_ctx_free(SSL_CTX *context) { api.ctx_free(context); }
// SSL_CTX_set_min_proto_version, SSL_set_tlsext_host_name and SSL_clear_mode are macros over the
// ctrl calls: written out here as OpenSSL's headers define them.
int findmy_ssl_ctx_set_min_tls12(SSL_CTX *context) {
    return (int)api.ctx_ctrl(context, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_2_VERSION, NULL);
}
void findmy_ssl_ctx_verify_peer(SSL_CTX *context) { api.ctx_set_verify(context, SSL_VERIFY_PEER, NULL); }
int findmy_ssl_ctx_load_ca_file(SSL_CTX *context, const char *file) {
    return api.ctx_load_verify_locations(context, file, NULL);
}
int findmy_ssl_ctx_set_default_verify_paths(SSL_CTX *context) { return api.ctx_set_default_verify_paths(context); }

SSL *findmy_ssl_new(SSL_CTX *context) { return api.ssl_new(context); }
void findmy_ssl_free(SSL *ssl) { api.ssl_free(ssl); }
void findmy_ssl_clear_auto_retry(SSL *ssl) { api.ssl_ctrl(ssl, SSL_CTRL_CLEAR_MODE, SSL_MODE_AUTO_RETRY, NULL); }
int findmy_ssl_set1_host(SSL *ssl, const char *host) { return api.set1_host(ssl, host); }
int findmy_ssl_set_server_name(SSL *ssl, const char *name) {
    return (int)api.ssl_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)name);
}
int findmy_ssl_set_fd(SSL *ssl, int fd) { return api.set_fd(ssl, fd); }
int findmy_ssl_connect(SSL *ssl) { return api.connect(ssl); }
long findmy_ssl_get_verify_result(const SSL *ssl) { return api.get_verify_result(ssl); }
const char *findmy_x509_verify_cert_error_string(long code) { return api.verify_cert_error_string(code); }
int findmy_ssl_pending(const SSL *ssl) { return api.pending(ssl); }
int findmy_ssl_read(SSL *ssl, void *buffer, int count) { return api.read(ssl, buffer, count); }
int findmy_ssl_write(SSL *ssl, const void *buffer, int count) { return api.write(ssl, buffer, count); }
int findmy_ssl_get_error(const SSL *ssl, int result) { return api.get_error(ssl, result); }
int findmy_ssl_shutdown(SSL *ssl) { return api.shutdown(ssl); }

void findmy_err_clear_error(void) { api.err_clear_error(); }
unsigned long findmy_err_get_error(void) { return api.err_get_error(); }
unsigned long findmy_err_peek_error(void) { return api.err_peek_error(); }
void findmy_err_error_string_n(unsigned long code, char *buffer, size_t size) {
    api.err_error_string_n(code, buffer, size);
}
