// Helpers for the push providers' keys (Crypto/SigningKey.swift, Crypto/WebPushEncryption.swift):
// OpenSSL 3 calls that are variadic, macros, or need OSSL_PARAM arrays, which Swift cannot build.
// Only non-deprecated OpenSSL 3.0 API is used.
#ifndef FINDMY_CCRYPTO_PUSH_H
#define FINDMY_CCRYPTO_PUSH_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <string.h>

/// A private key from PEM text (PKCS#8 "PRIVATE KEY", or the traditional "EC PRIVATE KEY" and
/// "RSA PRIVATE KEY"); NULL when the text holds none. Never prompts for a pass phrase.
static inline EVP_PKEY *findmy_pkey_from_pem(const unsigned char *pem, int length) {
    BIO *bio = BIO_new_mem_buf(pem, length);
    if (bio == NULL) return NULL;
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)"");
    BIO_free(bio);
    ERR_clear_error();
    return key;
}

/// The key as PKCS#8 PEM into `out`; its length, or -1 when it does not fit or cannot be written.
static inline int findmy_pkey_to_pem(EVP_PKEY *key, unsigned char *out, int capacity) {
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio == NULL) return -1;
    int length = -1;
    if (PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL) == 1) {
        char *data = NULL;
        long count = BIO_get_mem_data(bio, &data);
        if (count > 0 && count <= capacity) {
            memcpy(out, data, (size_t)count);
            length = (int)count;
        }
    }
    BIO_free(bio);
    return length;
}

/// A fresh NIST P-256 key pair.
static inline EVP_PKEY *findmy_p256_generate(void) {
    return EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
}

/// 1 when the key is an EC key on P-256 (OpenSSL names it prime256v1).
static inline int findmy_pkey_is_p256(EVP_PKEY *key) {
    if (EVP_PKEY_get_base_id(key) != EVP_PKEY_EC) return 0;
    char group[64];
    size_t length = 0;
    if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &length) != 1)
        return 0;
    return strcmp(group, "prime256v1") == 0;
}

static inline int findmy_pkey_is_rsa(EVP_PKEY *key) { return EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA; }

/// The uncompressed public point (0x04 || X || Y, 65 bytes for P-256); its length or 0.
static inline size_t findmy_p256_public_point(EVP_PKEY *key, unsigned char *out, size_t capacity) {
    size_t length = 0;
    if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY, out, capacity, &length) != 1) return 0;
    return length;
}

/// A P-256 key from its uncompressed public point and, when `scalar` is not NULL, its private
/// scalar. NULL when the point is not on the curve (checked: a peer's key is untrusted input).
static inline EVP_PKEY *findmy_p256_from_raw(
    const unsigned char *point, size_t point_length, const unsigned char *scalar, size_t scalar_length)
{
    EVP_PKEY *key = NULL;
    BIGNUM *d = NULL;
    OSSL_PARAM *params = NULL;
    EVP_PKEY_CTX *ctx = NULL;
    OSSL_PARAM_BLD *builder = OSSL_PARAM_BLD_new();
    if (builder == NULL) goto done;
    if (OSSL_PARAM_BLD_push_utf8_string(builder, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) != 1) goto done;
    if (OSSL_PARAM_BLD_push_octet_string(builder, OSSL_PKEY_PARAM_PUB_KEY, point, point_length) != 1) goto done;
    if (scalar != NULL) {
        d = BN_bin2bn(scalar, (int)scalar_length, NULL);
        if (d == NULL || OSSL_PARAM_BLD_push_BN(builder, OSSL_PKEY_PARAM_PRIV_KEY, d) != 1) goto done;
    }
    params = OSSL_PARAM_BLD_to_param(builder);
    ctx = EVP_PKEY_CTX_new_from_name(NULL, "EC", NULL);
    if (params == NULL || ctx == NULL || EVP_PKEY_fromdata_init(ctx) != 1) goto done;
    if (EVP_PKEY_fromdata(ctx, &key, scalar != NULL ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, params) != 1) {
        key = NULL;
        goto done;
    }
    EVP_PKEY_CTX_free(ctx);
    ctx = EVP_PKEY_CTX_new_from_pkey(NULL, key, NULL);
    if (ctx == NULL || EVP_PKEY_public_check(ctx) != 1) {
        EVP_PKEY_free(key);
        key = NULL;
    }
done:
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    BN_free(d);
    OSSL_PARAM_BLD_free(builder);
    ERR_clear_error();
    return key;
}

/// An ECDSA signature in DER (what OpenSSL's EVP_DigestSign gives) as the fixed-width R || S of
/// JWS (RFC 7518 §3.4), each `half` bytes, left-padded with zeros. 1 on success.
static inline int findmy_ecdsa_der_to_raw(const unsigned char *der, long der_length, unsigned char *out, int half) {
    const unsigned char *cursor = der;
    ECDSA_SIG *signature = d2i_ECDSA_SIG(NULL, &cursor, der_length);
    if (signature == NULL) return 0;
    const BIGNUM *r = NULL, *s = NULL;
    ECDSA_SIG_get0(signature, &r, &s);
    int ok = cursor == der + der_length && BN_bn2binpad(r, out, half) == half
        && BN_bn2binpad(s, out + half, half) == half;
    ECDSA_SIG_free(signature);
    return ok;
}

/// R || S back to DER into `out` (capacity at least 72 for P-256); the DER length or 0.
static inline int findmy_ecdsa_raw_to_der(const unsigned char *raw, int half, unsigned char *out, int capacity) {
    ECDSA_SIG *signature = ECDSA_SIG_new();
    BIGNUM *r = BN_bin2bn(raw, half, NULL);
    BIGNUM *s = BN_bin2bn(raw + half, half, NULL);
    if (signature == NULL || r == NULL || s == NULL || ECDSA_SIG_set0(signature, r, s) != 1) {
        ECDSA_SIG_free(signature);
        BN_free(r);
        BN_free(s);
        return 0;
    }
    int length = i2d_ECDSA_SIG(signature, NULL);
    if (length <= 0 || length > capacity) {
        ECDSA_SIG_free(signature);
        return 0;
    }
    unsigned char *cursor = out;
    length = i2d_ECDSA_SIG(signature, &cursor);
    ECDSA_SIG_free(signature);
    return length > 0 ? length : 0;
}

#endif
