// libssl for Crypto's TLSClientStream: the client side of TLS over a connected socket.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

// Macros over SSL_ctrl / SSL_CTX_ctrl, which Swift cannot call.
static inline int findmy_ssl_set_server_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}
static inline int findmy_ssl_ctx_set_min_tls12(SSL_CTX *context) {
    return (int)SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
}
static inline void findmy_ssl_clear_auto_retry(SSL *ssl) {
    SSL_clear_mode(ssl, SSL_MODE_AUTO_RETRY);
}
