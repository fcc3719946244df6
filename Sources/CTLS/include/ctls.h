// libssl for TLS's TLSClientStream, loaded on first use (dlopen) rather than linked: a program
// that never dials https:// (the agent on a plain-HTTP tailnet) then never maps libssl and
// libcrypto, about 1.7 MB resident. Thin wrappers, one per OpenSSL call TLSClientStream makes;
// the logic stays in Swift.
#ifndef FINDMY_CTLS_H
#define FINDMY_CTLS_H

#include <stddef.h>

// OpenSSL's own struct tags, so that ctls.c and OpenSSL's headers agree; opaque to Swift.
typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

// OpenSSL's values (ctls.c checks each against its headers).
enum {
    FINDMY_SSL_ERROR_WANT_READ = 2,
    FINDMY_SSL_ERROR_WANT_WRITE = 3,
    FINDMY_SSL_ERROR_SYSCALL = 5,
    FINDMY_SSL_ERROR_ZERO_RETURN = 6,
    FINDMY_X509_V_OK = 0,
};

// Loads libssl (and through it libcrypto) once per process. 1 when loaded; 0 with the reason in
// `why` (NUL-terminated, at most `size` bytes) when it cannot be.
int findmy_tls_load(char *why, size_t size);

SSL_CTX *findmy_ssl_ctx_new_client(void);
void findmy_ssl_ctx_free(SSL_CTX *context);
int findmy_ssl_ctx_set_min_tls12(SSL_CTX *context);
void findmy_ssl_ctx_verify_peer(SSL_CTX *context);
int findmy_ssl_ctx_load_ca_file(SSL_CTX *context, const char *file);
int findmy_ssl_ctx_set_default_verify_paths(SSL_CTX *context);

SSL *findmy_ssl_new(SSL_CTX *context);
void findmy_ssl_free(SSL *ssl);
void findmy_ssl_clear_auto_retry(SSL *ssl);
int findmy_ssl_set1_host(SSL *ssl, const char *host);
int findmy_ssl_set_server_name(SSL *ssl, const char *name);
int findmy_ssl_set_fd(SSL *ssl, int fd);
int findmy_ssl_connect(SSL *ssl);
long findmy_ssl_get_verify_result(const SSL *ssl);
const char *findmy_x509_verify_cert_error_string(long code);
int findmy_ssl_pending(const SSL *ssl);
int findmy_ssl_read(SSL *ssl, void *buffer, int count);
int findmy_ssl_write(SSL *ssl, const void *buffer, int count);
int findmy_ssl_get_error(const SSL *ssl, int result);
int findmy_ssl_shutdown(SSL *ssl);

void findmy_err_clear_error(void);
unsigned long findmy_err_get_error(void);
unsigned long findmy_err_peek_error(void);
void findmy_err_error_string_n(unsigned long code, char *buffer, size_t size);

#endif
