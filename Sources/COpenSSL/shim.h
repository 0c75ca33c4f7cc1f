#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <openssl/err.h>
#include <openssl/crypto.h>

/* OPENSSL_free is a macro, which Swift cannot call. */
static inline void COpenSSL_free(void *p) { OPENSSL_free(p); }

#endif
