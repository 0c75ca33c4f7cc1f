#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <openssl/bn.h>
#include <openssl/param_build.h>

/* Macros Swift cannot call. */
static inline void COpenSSL_free(void *p) { OPENSSL_free(p); }
static inline long COpenSSL_set_tlsext_host_name(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline long COpenSSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) { return SSL_CTX_set_min_proto_version(ctx, version); }
#include <openssl/core_names.h>

/* A public key from OSSL_PARAMs: the builder keeps pointers to names and values until
   OSSL_PARAM_BLD_to_param, so the whole build stays here, where they live long enough. */
static inline EVP_PKEY *COpenSSL_public_key(const char *type, OSSL_PARAM_BLD *bld) {
    EVP_PKEY *key = NULL;
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    EVP_PKEY_CTX *ctx = params ? EVP_PKEY_CTX_new_from_name(NULL, type, NULL) : NULL;
    if (ctx && EVP_PKEY_fromdata_init(ctx) == 1) (void)EVP_PKEY_fromdata(ctx, &key, EVP_PKEY_PUBLIC_KEY, params);
    EVP_PKEY_CTX_free(ctx);
    OSSL_PARAM_free(params);
    return key;
}

static inline EVP_PKEY *COpenSSL_rsa_public_key(const unsigned char *n, size_t n_len, const unsigned char *e, size_t e_len) {
    EVP_PKEY *key = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    BIGNUM *bn_n = BN_bin2bn(n, (int)n_len, NULL), *bn_e = BN_bin2bn(e, (int)e_len, NULL);
    if (bld && bn_n && bn_e && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_N, bn_n) == 1
        && OSSL_PARAM_BLD_push_BN(bld, OSSL_PKEY_PARAM_RSA_E, bn_e) == 1) key = COpenSSL_public_key("RSA", bld);
    BN_free(bn_n);
    BN_free(bn_e);
    OSSL_PARAM_BLD_free(bld);
    return key;
}

/* point: the uncompressed P-256 point, 0x04 || x || y (65 bytes). */
static inline EVP_PKEY *COpenSSL_p256_public_key(const unsigned char *point, size_t length) {
    EVP_PKEY *key = NULL;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    if (bld && OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) == 1
        && OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point, length) == 1) key = COpenSSL_public_key("EC", bld);
    OSSL_PARAM_BLD_free(bld);
    return key;
}

#endif
